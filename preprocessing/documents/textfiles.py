"""Plain text, Markdown and HTML: decoding with charset detection, and HTML to markdown-ish text."""

from __future__ import annotations

import codecs
import html as _html
import logging
import re
import unicodedata
from html.parser import HTMLParser

from preprocessing.input_errors import InputError

log = logging.getLogger(__name__)

__all__ = ["decode_text", "html_to_text", "normalise_text", "split_form_feeds"]

_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
# Control characters other than tab, newline, carriage return and form feed: text files hardly have any.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0e-\x1f\x7f]")
_MAX_CONTROL_RATIO = 0.01
# charset-normalizer "chaos" difference within which two guesses count as equally good.
_CHAOS_TIE = 0.1


def decode_text(data: bytes, *, what: str, preferred: tuple[str, ...] = ("cp1252",)) -> str:
    """Decode a text file: BOM first, then strict UTF-8, then charset-normalizer's guess.

    Single-byte code pages often fit a short text equally well (charset-normalizer may pick cp1257 for
    German written in cp1252); among the near-equal guesses the first ``preferred`` encoding wins.

    A NUL byte without a UTF-16/32 BOM, an undecodable body or a body full of control characters is a
    binary file wearing a text extension: ``binary_text``.
    """
    text: str | None = None
    for bom, encoding in _BOMS:  # UTF-32 LE starts with the UTF-16 LE BOM, so its BOM is tried first
        if data.startswith(bom):
            try:
                text = data.decode(encoding)
            except UnicodeDecodeError as exc:
                raise InputError("binary_text", f"{what}: has a {encoding} BOM but does not decode: {exc}") from exc
            break
    if text is None:
        if b"\x00" in data:
            raise InputError("binary_text", f"{what}: contains NUL bytes, so it is not a text file")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = _guess_decode(data, preferred)
        if text is None:
            raise InputError("binary_text", f"{what}: no text encoding fits its bytes")
    controls = len(_CONTROL.findall(text))
    if text and controls / len(text) > _MAX_CONTROL_RATIO:
        raise InputError("binary_text", f"{what}: {controls} control characters in {len(text)}; not a text file")
    return text


def _guess_decode(data: bytes, preferred: tuple[str, ...]) -> str | None:
    from charset_normalizer import from_bytes

    matches = list(from_bytes(data))
    if not matches:
        return None
    least = min(m.chaos for m in matches)
    close = {codecs.lookup(m.encoding).name: m for m in matches if m.chaos <= least + _CHAOS_TIE}
    for name in preferred:
        if (m := close.get(codecs.lookup(name).name)) is not None:
            return str(m)
    return str(matches[0])


def normalise_text(text: str) -> str:
    """NFC, Unix newlines, no trailing spaces, at most one blank line in a row, no stray control characters."""
    text = unicodedata.normalize("NFC", text).replace("\r\n", "\n").replace("\r", "\n")
    text = _CONTROL.sub("", text)
    lines = [line.rstrip() for line in text.split("\n")]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def split_form_feeds(text: str) -> list[str]:
    """Page texts of a plain-text file: form feeds (as written by pdftotext and printers) separate pages."""
    return [normalise_text(part) for part in text.split("\f")]


# ------------------------------------------------------------------------------------------- HTML

_SKIP = frozenset({"script", "style", "noscript", "template", "svg", "head"})
_BLOCK = frozenset(
    {
        "address", "article", "aside", "blockquote", "br", "dd", "div", "dl", "dt", "figcaption", "figure",
        "footer", "form", "header", "hr", "li", "main", "nav", "ol", "p", "pre", "section", "table", "tr", "ul",
    }
)  # fmt: skip
_HEADINGS = {f"h{i}": i for i in range(1, 7)}


class _TextCollector(HTMLParser):
    """Collects visible text; block elements become line breaks, headings ``#`` lines, list items ``- ``."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title: list[str] = []
        self._skip_depth = 0
        self._in_title = False
        self._pre_depth = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self._in_title = True
        elif tag == "body":
            self._skip_depth = 0  # pages that never close <head> still show their body
        elif tag in _SKIP:
            self._skip_depth += 1
        elif tag in _HEADINGS:
            self.parts.append("\n\n" + "#" * _HEADINGS[tag] + " ")
        elif tag == "li":
            self.parts.append("\n- ")
        elif tag in ("td", "th"):
            self.parts.append(" | ")
        elif tag in _BLOCK:
            self.parts.append("\n\n" if tag in ("p", "div", "section", "article", "table") else "\n")
        if tag == "pre":
            self._pre_depth += 1

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("br", "hr"):
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        elif tag in _SKIP:
            self._skip_depth = max(0, self._skip_depth - 1)
        elif tag in _HEADINGS or tag in _BLOCK:
            self.parts.append("\n")
        if tag == "pre":
            self._pre_depth = max(0, self._pre_depth - 1)

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title.append(data)
        elif self._skip_depth == 0:
            # Source whitespace is layout, not content, except inside <pre>.
            self.parts.append(data if self._pre_depth else re.sub(r"\s+", " ", data))


# A "<" with no ">" before the next "<" opens no tag a browser would show. html.parser rescans the rest of the
# input for every such "<" (quadratic: "<a " x 120k took minutes), so they become text before parsing. The
# lookahead stops at the next "<", so the scan is linear.
_STRAY_LT = re.compile(r"<(?![^<>]*>)")
_ANY_TAG = re.compile(r"<[^<>]*>")


def html_to_text(html: str) -> str:
    """Visible text of an HTML page; scripts and styles dropped, the <title> kept as a top heading."""
    html = _STRAY_LT.sub("&lt;", html)
    parser = _TextCollector()
    try:
        parser.feed(html)
        parser.close()
    except (AssertionError, ValueError, IndexError) as exc:  # html.parser before 3.13 asserts on odd markup
        log.warning("HTML parser gave up (%s: %s); reading the page with its tags stripped", type(exc).__name__, exc)
        return normalise_text(_html.unescape(_ANY_TAG.sub(" ", html)))
    body = "".join(parser.parts)
    body = "\n".join(line.strip() for line in body.split("\n"))
    title = " ".join("".join(parser.title).split())
    if title and not body.lstrip().startswith(f"# {title}"):
        body = f"# {title}\n\n{body}"
    return normalise_text(body)

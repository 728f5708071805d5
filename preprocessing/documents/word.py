"""DOCX: zip-bomb checks before opening, then paragraphs and tables in order with python-docx.

Headings become ``#`` lines and list paragraphs ``- `` lines, so chunking can split on them. DOCX has no
fixed pages: explicit page breaks, and the breaks Word recorded when it last laid the file out
(``w:lastRenderedPageBreak``), start a new page; a file without either is one page.
"""

from __future__ import annotations

import io
import re
import zipfile
from typing import Any

from preprocessing.documents.model import DocumentLimits, Page
from preprocessing.documents.textfiles import normalise_text
from preprocessing.input_errors import InputError

__all__ = ["check_zip", "extract_docx"]

_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
_PAGE_BREAK = "\f"
# Compressed XML routinely reaches 10-20x; only large archives are judged by ratio, so a tiny file of
# repeated whitespace is not refused.
_RATIO_FLOOR_BYTES = 10 * 1024 * 1024


# An encrypted Word file is not a zip but an OLE compound file holding an "EncryptedPackage" stream.
_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_ENCRYPTED_PACKAGE = "EncryptedPackage".encode("utf-16-le")
_INFLATE_BLOCK = 64 * 1024


def check_zip(data: bytes, *, what: str, limits: DocumentLimits) -> None:
    """Refuse a zip bomb: first from the central directory, before anything is inflated, then by inflating
    every member in bounded blocks and counting the real bytes (sizes in the directory can lie).
    """
    if data.startswith(_OLE_MAGIC):
        if _ENCRYPTED_PACKAGE in data:
            raise InputError("docx_encrypted", f"{what}: encrypted with a password; save an unprotected copy")
        raise InputError("docx_malformed", f"{what}: an old binary Word (.doc) file; save it as .docx")
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            infos = zf.infolist()
            names = {i.filename for i in infos}
    except (zipfile.BadZipFile, ValueError, OSError) as exc:
        raise InputError("docx_malformed", f"{what}: not a zip archive, so not a DOCX ({exc})") from exc
    if "word/document.xml" not in names:
        raise InputError("docx_malformed", f"{what}: no word/document.xml; is it a .doc or another format renamed?")
    total = sum(i.file_size for i in infos)
    packed = max(1, sum(i.compress_size for i in infos))
    if total > limits.max_unzipped_bytes:
        raise InputError("docx_too_large", f"{what}: inflates to {total} bytes, limit {limits.max_unzipped_bytes}")
    if total > _RATIO_FLOOR_BYTES and total / packed > limits.max_zip_ratio:
        raise InputError(
            "docx_too_large", f"{what}: compression ratio {total / packed:.0f} above {limits.max_zip_ratio:.0f}"
        )
    _check_inflated(data, what=what, limits=limits)


def _check_inflated(data: bytes, *, what: str, limits: DocumentLimits) -> None:
    """Inflate each member in 64 KiB blocks (``zipfile`` bounds each block's output), stopping at the caps.

    ``ZipFile.read`` inflates a member in one call whose output is bounded only by 2 GiB, whatever size the
    directory declares; reading in blocks keeps this check's memory flat. A member whose real size differs
    from its declared one fails its CRC check here (``docx_malformed``), so python-docx only ever opens
    members of their declared, already capped, sizes.
    """
    total = xml = 0
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            for info in zf.infolist():
                is_xml = info.filename.endswith((".xml", ".rels"))
                with zf.open(info) as member:
                    while block := member.read(_INFLATE_BLOCK):
                        total += len(block)
                        xml += len(block) if is_xml else 0
                        if total > limits.max_unzipped_bytes:
                            raise InputError(
                                "docx_too_large",
                                f"{what}: inflates past {limits.max_unzipped_bytes} bytes (its directory said less)",
                            )
                        if xml > limits.max_xml_bytes:
                            raise InputError(
                                "docx_too_large",
                                f"{what}: more than {limits.max_xml_bytes} bytes of XML; split the document",
                            )
    except InputError:
        raise
    except (zipfile.BadZipFile, ValueError, OSError, EOFError, NotImplementedError) as exc:
        raise InputError("docx_malformed", f"{what}: a damaged zip member ({type(exc).__name__}: {exc})") from exc


def extract_docx(data: bytes, *, what: str, limits: DocumentLimits) -> list[Page]:
    """Pages of markdown-ish text from a DOCX (see the module docstring for what a page is)."""
    check_zip(data, what=what, limits=limits)
    import docx
    from docx.table import Table

    try:
        document = docx.Document(io.BytesIO(data))
        blocks: list[str] = []
        for item in document.iter_inner_content():
            blocks.append(_table_text(item) if isinstance(item, Table) else _paragraph_text(item))
    except Exception as exc:  # untrusted XML: python-docx/lxml raise many types on broken parts
        raise InputError("docx_malformed", f"{what}: unreadable DOCX ({type(exc).__name__}: {exc})") from exc
    body = "\n\n".join(b for b in blocks if b)
    # Several breaks with nothing between them (a hard break followed by Word's rendered break) are one.
    texts = [normalise_text(t) for t in re.split(r"(?:\s*\f)+", body)]
    if len(texts) > limits.max_pages:
        raise InputError("too_many_pages", f"{what}: {len(texts)} pages, limit {limits.max_pages}; split the file")
    return [Page(number=i + 1, text=t) for i, t in enumerate(texts)]


def _run_text(run_element: Any) -> str:
    out: list[str] = []
    for child in run_element.iterchildren():
        tag = child.tag
        if tag == f"{_W}t":
            out.append(child.text or "")
        elif tag == f"{_W}tab":
            out.append("\t")
        elif tag == f"{_W}br":
            out.append(_PAGE_BREAK if child.get(f"{_W}type") == "page" else "\n")
        elif tag in (f"{_W}cr",):
            out.append("\n")
        elif tag == f"{_W}lastRenderedPageBreak":
            out.append(_PAGE_BREAK)
    return "".join(out)


def _paragraph_text(paragraph: Any) -> str:
    # Walk runs (also those inside hyperlinks and smart tags) so page breaks keep their position.
    text = "".join(_run_text(r) for r in paragraph._p.iter(f"{_W}r"))
    style = (paragraph.style.name if paragraph.style is not None else "") or ""
    prefix = ""
    if style == "Title":
        prefix = "# "
    elif m := re.fullmatch(r"Heading (\d)", style):
        prefix = "#" * min(6, int(m.group(1))) + " "
    elif style.startswith("List"):
        prefix = "- "
    if not prefix:
        return text
    # Only the first non-blank stretch gets the marker; page breaks around it keep their place.
    parts = text.split(_PAGE_BREAK)
    for i, part in enumerate(parts):
        if part.strip():
            parts[i] = prefix + " ".join(part.split())
            break
    return _PAGE_BREAK.join(parts)


def _table_text(table: Any) -> str:
    rows = []
    for row in table.rows:
        cells: list[str] = []
        seen: set[int] = set()
        for cell in row.cells:  # a merged cell comes back once per grid column it spans
            if id(cell._tc) not in seen:
                seen.add(id(cell._tc))
                cells.append(" ".join(cell.text.split()))
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)

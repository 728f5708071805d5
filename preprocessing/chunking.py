"""Token-aware chunking of a page-numbered document with the served model's own tokenizer.

Text is split on headings and paragraphs first, then on lines and sentences, and only then at token
boundaries, so a chunk is the largest run of whole sections that fits the budget. Every chunk records
its exact token count (the tokenizer's count of ``chunk.text``, never an estimate) and the pages its
text came from. Overlap repeats the tail of the previous chunk (whole sentences where they fit) so a
fact cut by a boundary is seen whole once; a chunk that starts a new section gets no overlap.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from preprocessing.documents.model import Document, Page

__all__ = [
    "CountTokens",
    "Passage",
    "chunk_budget",
    "chunk_document",
    "chunk_pages",
    "load_token_counter",
    "token_counter",
]

CountTokens = Callable[[str], int]

MIN_CHUNK_TOKENS = 64
_HEADING = re.compile(r"^#{1,6} \S")
_BLANK_LINES = re.compile(r"\n\s*\n")
# Sentence ends: Latin punctuation followed by whitespace, CJK full stops with or without it; and newlines.
_SENTENCE_SEP = re.compile(r"(\n+|(?<=[.!?;])\s+|(?<=[\u3002\uff01\uff1f\uff1b])\s*)")
# A heading starts a new chunk once the current one is at least this full, rather than being packed after it.
_HEADING_BREAK_FILL = 0.5
# Starting window of a hard split, in characters per token; it doubles until it holds more than the budget.
_CHARS_PER_TOKEN_GUESS = 8
# No text longer than this many budgets' worth of characters is ever handed to the tokenizer whole: a 49 MB
# line would take gigabytes in one encode call. Longer blocks and sentences are cut by characters first.
_SPAN_BUDGETS = 4


@dataclass(frozen=True, slots=True)
class Passage:
    """One model-sized passage of a document, the text one map prompt carries (the queue's chunks are another
    thing: ``vlbatch.db.models.Chunk``). ``text[:overlap_chars]`` repeats the previous passage's tail."""

    index: int
    text: str
    token_count: int
    pages: tuple[int, ...]
    overlap_chars: int = 0

    @property
    def first_page(self) -> int:
        return self.pages[0]

    @property
    def last_page(self) -> int:
        return self.pages[-1]


@dataclass(frozen=True, slots=True)
class _Piece:
    text: str
    page: int
    tokens: int  # of the text alone, when it opens a chunk
    joined: int  # of separator + text, when it follows another piece (" word" is often one token, not two)
    sep: str  # what joins it to the piece before it: a paragraph break, a newline, a space or nothing
    heading: bool = False


# ------------------------------------------------------------------------------------- tokenizers


def token_counter(tokenizer: Any) -> CountTokens:
    """Wrap a ``tokenizers.Tokenizer`` or a transformers tokenizer as ``count(text) -> int``.

    Special tokens are not added: the chat template's tokens are part of the prompt overhead instead.
    """

    def count(text: str) -> int:
        encoded = tokenizer.encode(text, add_special_tokens=False)
        return len(encoded.ids) if hasattr(encoded, "ids") else len(encoded)

    return count


def load_token_counter(model_dir: Path) -> CountTokens:
    """The token counter of a local model directory: ``tokenizer.json`` via ``tokenizers`` when present
    (fast, no transformers import), else ``transformers.AutoTokenizer``.
    """
    model_dir = Path(model_dir)
    if (model_dir / "tokenizer.json").is_file():
        from tokenizers import Tokenizer

        return token_counter(Tokenizer.from_file(str(model_dir / "tokenizer.json")))
    from transformers import AutoTokenizer

    return token_counter(AutoTokenizer.from_pretrained(str(model_dir)))


def chunk_budget(*, max_model_len: int, prompt_tokens: int, max_output_tokens: int, margin: int = 32) -> int:
    """Tokens of document text one prompt can carry. A budget too small to be useful is a configuration
    error (raise the context length or lower the output budget), so it raises before any item runs.
    """
    budget = max_model_len - prompt_tokens - max_output_tokens - margin
    if budget < MIN_CHUNK_TOKENS:
        raise ValueError(
            f"max_model_len={max_model_len} leaves {budget} tokens for document text after prompt_tokens="
            f"{prompt_tokens}, max_output_tokens={max_output_tokens} and margin={margin}; need at least "
            f"{MIN_CHUNK_TOKENS}: raise max_model_len or lower the output bounds"
        )
    return budget


# --------------------------------------------------------------------------------------- chunking


def chunk_document(
    doc: Document,
    count_tokens: CountTokens | Any,
    *,
    max_tokens: int,
    overlap_tokens: int = 0,
    skip_ocr: bool = False,
) -> list[Passage]:
    """Chunks of ``doc``. Pages still waiting for OCR are an error unless ``skip_ocr`` (they would be lost)."""
    pending = doc.ocr_pages
    if pending and not skip_ocr:
        raise ValueError(f"{doc.source}: pages {pending} need OCR first (replace_page_text), or pass skip_ocr=True")
    return chunk_pages(doc.pages, count_tokens, max_tokens=max_tokens, overlap_tokens=overlap_tokens)


def chunk_pages(
    pages: Iterable[Page], count_tokens: CountTokens | Any, *, max_tokens: int, overlap_tokens: int = 0
) -> list[Passage]:
    """Pack pages' text into chunks of at most ``max_tokens`` tokens each (see the module docstring).

    ``count_tokens`` is ``count(text) -> int`` or a tokenizer object (``tokenizers``/``transformers``).
    """
    if hasattr(count_tokens, "encode"):  # checked first: a transformers tokenizer is callable too
        count_tokens = token_counter(count_tokens)
    if max_tokens < MIN_CHUNK_TOKENS:
        raise ValueError(f"max_tokens={max_tokens} is below {MIN_CHUNK_TOKENS}")
    if not 0 <= overlap_tokens <= max_tokens // 2:
        raise ValueError(f"overlap_tokens={overlap_tokens} must be in 0..max_tokens/2 ({max_tokens // 2})")
    pieces = [p for page in pages for p in _page_pieces(page, count_tokens, max_tokens)]
    chunks: list[Passage] = []
    previous: list[_Piece] = []
    i = 0
    while i < len(pieces):
        overlap = [] if pieces[i].heading else _overlap(previous, count_tokens, overlap_tokens)
        current = list(overlap)
        estimate = repeated = _estimate(current)
        start = i
        while i < len(pieces):
            piece = pieces[i]
            add = piece.joined if current else piece.tokens
            if i > start and (
                estimate + add > max_tokens
                or (piece.heading and estimate - repeated >= max_tokens * _HEADING_BREAK_FILL)
            ):
                break
            if i == start and estimate + add > max_tokens:  # progress beats overlap
                current, overlap, estimate, repeated, add = [], [], 0, 0, piece.tokens
            current.append(piece)
            estimate += add
            i += 1
        # Token counts are not additive across joins; the real count decides, trimming from the end.
        while True:
            text = _join(current)
            tokens = count_tokens(text)
            if tokens <= max_tokens:
                break
            if len(current) - len(overlap) > 1:
                current.pop()
                i -= 1
            elif overlap:
                current, overlap = current[len(overlap) :], []
            else:  # a lone piece was counted alone, so it fits; reaching here means the counter is unstable
                raise RuntimeError(f"piece of {tokens} tokens exceeds max_tokens={max_tokens}")
        overlap_chars = len(_join(overlap)) + len(current[len(overlap)].sep) if overlap else 0
        pages_of = tuple(sorted({p.page for p in current}))
        chunks.append(Passage(len(chunks), text, tokens, pages_of, overlap_chars))
        previous = current
    return chunks


def _join(pieces: Sequence[_Piece]) -> str:
    return "".join((p.sep if k else "") + p.text for k, p in enumerate(pieces))


def _estimate(pieces: Sequence[_Piece]) -> int:
    return sum(p.joined if k else p.tokens for k, p in enumerate(pieces))


def _piece(text: str, page: int, sep: str, count: CountTokens, heading: bool = False) -> _Piece:
    tokens = count(text)
    return _Piece(text, page, tokens, count(sep + text) if sep else tokens, sep, heading)


def _page_pieces(page: Page, count: CountTokens, max_tokens: int) -> list[_Piece]:
    out: list[_Piece] = []
    span = max_tokens * _CHARS_PER_TOKEN_GUESS * _SPAN_BUDGETS
    for block in _blocks(page.text):
        heading = bool(_HEADING.match(block))
        tokens = count(block) if len(block) <= span else max_tokens + 1
        if tokens <= max_tokens:
            out.append(_Piece(block, page.number, tokens, count("\n\n" + block), "\n\n", heading))
            continue
        first = True
        for text, sep in _sentences(block):
            sep = "\n\n" if first else sep
            for span_text, span_sep in _spans(text, span):
                for k, (part, part_sep) in enumerate(_hard_split(span_text, count, max_tokens)):
                    out.append(_piece(part, page.number, sep if k == 0 else part_sep, count, heading and first))
                    first = False
                sep = span_sep
    return out


def _spans(text: str, limit: int) -> list[tuple[str, str]]:
    """``text`` cut into (span, separator after it) of at most ``limit`` characters, at the last space of each
    window when one is in its second half: linear work, so the tokenizer and the hard split only ever see
    bounded text."""
    if len(text) <= limit:
        return [(text, " ")]
    out: list[tuple[str, str]] = []
    start = 0
    while start < len(text):
        end = min(len(text), start + limit)
        if end < len(text):
            space = text.rfind(" ", start + limit // 2, end)
            if space > start:
                out.append((text[start:space], " "))
                start = space + 1
                continue
        out.append((text[start:end], ""))
        start = end
    return [(t, sep) for t, sep in out if t]


def _blocks(text: str) -> list[str]:
    """Paragraphs, with every markdown heading line starting a block of its own."""
    blocks: list[str] = []
    for para in _BLANK_LINES.split(text):
        current: list[str] = []
        for line in para.split("\n"):
            if _HEADING.match(line) and current:
                blocks.append("\n".join(current))
                current = []
            current.append(line)
        blocks.append("\n".join(current))
    return [b.strip() for b in blocks if b.strip()]


def _sentences(block: str) -> list[tuple[str, str]]:
    """(sentence, separator before it) pairs; the separator is a newline or a space, as in the source."""
    parts = _SENTENCE_SEP.split(block)
    out: list[tuple[str, str]] = []
    sep = ""
    for k, part in enumerate(parts):
        if k % 2:
            sep = "\n" if "\n" in part else (" " if part else "")
        elif part.strip():
            out.append((part.strip(), sep))
    return out


def _hard_split(text: str, count: CountTokens, max_tokens: int) -> list[tuple[str, str]]:
    """Split a too-long sentence into (part, separator) with at most ``max_tokens`` tokens each, at a space
    when one is in the second half of the part, else at a character boundary.

    Every count looks at a window a few times the part's size, never at the whole rest: a 1 MB paragraph
    without a full stop would otherwise cost a tokenizer pass over the rest per part (quadratic).
    """
    out: list[tuple[str, str]] = []
    sep = ""
    rest = text
    window = max_tokens * _CHARS_PER_TOKEN_GUESS
    while rest:
        window_tokens = count(rest[:window])
        while window < len(rest) and window_tokens <= max_tokens:
            window *= 2
            window_tokens = count(rest[:window])
        if window >= len(rest) and window_tokens <= max_tokens:
            out.append((rest, sep))
            break
        cut = _longest_prefix(rest[:window], count, max_tokens, window_tokens)
        window = cut + cut // 4 + 16  # the next part is about as long as this one
        space = rest.rfind(" ", 0, cut + 1)
        if space > cut // 2 and count(rest[:space].rstrip()) <= max_tokens:
            out.append((rest[:space].rstrip(), sep))
            rest, sep = rest[space:].lstrip(), " "
        else:
            out.append((rest[:cut], sep))
            rest, sep = rest[cut:], ""
    return out


def _longest_prefix(text: str, count: CountTokens, max_tokens: int, text_tokens: int) -> int:
    """A long ``k`` with ``count(text[:k]) <= max_tokens``, for a ``text`` of ``text_tokens`` > max_tokens.
    (Counts are not monotonic in the prefix length, so "longest" is approximate, "fits" is not.)

    Interpolation search: token counts grow almost linearly with length, so a guess from the two bounds'
    counts lands near the cut and a handful of tokenizer calls suffice (plain bisection needs ~17).
    """
    lo, lo_tokens = 0, 0
    hi, hi_tokens = len(text), text_tokens  # invariant: text[:lo] fits, text[:hi] does not
    close_enough = max_tokens - max_tokens // 64  # a part within 1.5% of the budget is full enough
    while hi - lo > 1 and lo_tokens < close_enough:
        guess = lo + int((hi - lo) * (max_tokens - lo_tokens) / max(1, hi_tokens - lo_tokens))
        mid = min(hi - 1, max(lo + 1, guess))
        tokens = count(text[:mid])
        if tokens <= max_tokens:
            lo, lo_tokens = mid, tokens
            if mid == guess and hi - lo > 1 and count(text[: mid + 1]) > max_tokens:
                break  # the guess was exact: one more character overflows
        else:
            hi, hi_tokens = mid, tokens
    return max(1, lo)  # a single character always goes: it is at most a few byte tokens


def _overlap(previous: list[_Piece], count: CountTokens, budget: int) -> list[_Piece]:
    """The tail of the previous chunk within ``budget`` tokens: whole pieces, else the end of the last one."""
    if budget <= 0 or len(previous) < 1:
        return []
    tail: list[_Piece] = []
    used = 0
    for piece in reversed(previous[1:]):  # never the whole previous chunk
        # Walking backwards, the piece now first in the tail costs its own tokens; the one after it, joined.
        cost = piece.tokens + (tail[0].joined - tail[0].tokens if tail else 0)
        if used + cost > budget:
            break
        tail.insert(0, piece)
        used += cost
    if tail:
        return tail
    last = previous[-1]
    start = _shortest_suffix_start(last.text, count, budget)
    if start >= len(last.text):
        return []
    return [_piece(last.text[start:], last.page, "\n\n", count)]


def _shortest_suffix_start(text: str, count: CountTokens, budget: int) -> int:
    """Smallest start index whose suffix fits ``budget`` tokens, moved forward to a word start. Only a tail
    window a few times the budget is searched, so a long last piece is not re-tokenized a dozen times.
    """
    window = budget * _CHARS_PER_TOKEN_GUESS
    while window < len(text) and count(text[-window:]) <= budget:
        window *= 2
    lo, hi = max(0, len(text) - window), len(text)  # text[hi:] (empty) always fits
    while lo < hi:
        mid = (lo + hi) // 2
        if count(text[mid:]) <= budget:
            hi = mid
        else:
            lo = mid + 1
    space = text.find(" ", lo)
    return lo if lo == 0 or text[lo - 1] == " " or space < 0 else space + 1

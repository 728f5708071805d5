"""Entry points: detect the format, enforce size limits, hash the bytes, dispatch to an extractor."""

from __future__ import annotations

import hashlib
from pathlib import Path

from preprocessing.documents.model import Document, DocumentLimits, Format, Page
from preprocessing.documents.pdf import extract_pdf
from preprocessing.documents.textfiles import decode_text, html_to_text, split_form_feeds
from preprocessing.documents.word import extract_docx
from preprocessing.input_errors import InputError
from preprocessing.paths import open_regular_file, read_regular_file, read_up_to

__all__ = ["EXTENSIONS", "content_hash", "detect_format", "hash_file", "load_document", "parse_document"]

EXTENSIONS: dict[str, Format] = {
    ".pdf": "pdf",
    ".docx": "docx",
    ".md": "markdown",
    ".markdown": "markdown",
    ".html": "html",
    ".htm": "html",
    ".txt": "text",
    ".text": "text",
}
_READ_BLOCK = 1024 * 1024


def detect_format(name: str) -> Format:
    """The format a file name claims; extractors then check the bytes agree (a .txt with NULs is refused)."""
    suffix = Path(name).suffix.lower()
    fmt = EXTENSIONS.get(suffix)
    if fmt is None:
        hint = "; save it as .docx" if suffix == ".doc" else ""
        known = ", ".join(sorted(EXTENSIONS))
        raise InputError("unsupported_format", f"{name}: '{suffix or 'no extension'}' is not one of {known}{hint}")
    return fmt


def content_hash(data: bytes) -> str:
    """sha256 hex of the file's bytes: the key for "unchanged since the last run, skip it"."""
    return hashlib.sha256(data).hexdigest()


def hash_file(path: Path) -> str:
    """``content_hash`` of a file read in blocks, for an inbox scan that should not load every file."""
    digest = hashlib.sha256()
    with open_regular_file(Path(path)) as (fd, _):  # a FIFO swapped in after the scan must not block it
        while block := read_up_to(fd, _READ_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def load_document(path: Path, *, limits: DocumentLimits | None = None, fmt: Format | None = None) -> Document:
    """Read and extract one file. Raises ``InputError`` with a stable code for a bad file; never anything else
    for bad content (an ``OSError`` other than a missing file is an environment problem and propagates).
    """
    limits = limits or DocumentLimits()
    path = Path(path)
    fmt = fmt or detect_format(path.name)
    # Only a regular file is opened (a FIFO or device is refused, never waited on), and a huge one is refused
    # before it is read into memory.
    data = read_regular_file(path, max_bytes=limits.max_bytes, too_large="file_too_large")
    return parse_document(data, fmt=fmt, source=str(path), limits=limits)


def parse_document(data: bytes, *, fmt: Format, source: str, limits: DocumentLimits | None = None) -> Document:
    """Extract a document from bytes already in memory (an upload, or a file ``load_document`` read)."""
    limits = limits or DocumentLimits()
    if len(data) > limits.max_bytes:
        raise InputError("file_too_large", f"{source}: {len(data)} bytes, limit {limits.max_bytes}")
    if not data.strip():
        raise InputError("empty_document", f"{source}: the file is empty")
    pages = _extract(data, fmt=fmt, what=source, limits=limits)
    if not any(p.text or p.needs_ocr for p in pages):
        raise InputError("empty_document", f"{source}: no text on any of its {len(pages)} page(s)")
    return Document(
        pages=tuple(pages), content_hash=content_hash(data), source=source, format=fmt, size_bytes=len(data)
    )


def _extract(data: bytes, *, fmt: Format, what: str, limits: DocumentLimits) -> list[Page]:
    if fmt == "pdf":
        return extract_pdf(data, what=what, limits=limits)
    if fmt == "docx":
        return extract_docx(data, what=what, limits=limits)
    if data.startswith(b"%PDF-") or data.startswith(b"PK\x03\x04"):
        raise InputError("binary_text", f"{what}: holds a PDF or zip archive, not {fmt}; fix the file extension")
    text = decode_text(data, what=what, preferred=limits.preferred_encodings)
    if fmt == "html":
        text = html_to_text(text)
    texts = split_form_feeds(text)
    if len(texts) > limits.max_pages:
        raise InputError("too_many_pages", f"{what}: {len(texts)} pages, limit {limits.max_pages}; split the file")
    return [Page(number=i + 1, text=t) for i, t in enumerate(texts)]

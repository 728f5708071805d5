"""The document value types every extractor returns, and the limits they enforce."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Literal

Format = Literal["pdf", "docx", "markdown", "html", "text"]
FORMATS: tuple[Format, ...] = ("pdf", "docx", "markdown", "html", "text")


@dataclass(frozen=True, slots=True)
class Page:
    """One page of extracted text. ``number`` is 1-based, as printed on a viewer's page counter.

    ``needs_ocr`` marks a page without a usable text layer (a scan): render it with
    ``preprocessing.documents.render_page`` and let the vision model transcribe it.
    """

    number: int
    text: str
    needs_ocr: bool = False


@dataclass(frozen=True, slots=True)
class Document:
    """Extracted text of one file, page by page. ``content_hash`` is the sha256 hex of the file's bytes."""

    pages: tuple[Page, ...]
    content_hash: str
    source: str
    format: Format
    size_bytes: int

    @property
    def page_count(self) -> int:
        return len(self.pages)

    @property
    def ocr_pages(self) -> list[int]:
        """Page numbers still waiting for a transcription."""
        return [p.number for p in self.pages if p.needs_ocr]

    @property
    def text(self) -> str:
        return "\n\n".join(p.text for p in self.pages if p.text)


@dataclass(frozen=True, slots=True)
class DocumentLimits:
    """Per-document limits; the lead maps these from ``Settings``. Exceeding one fails that document only."""

    max_bytes: int = 100 * 1024 * 1024
    max_pages: int = 500
    # DOCX is a zip: refuse archives that would inflate past this many bytes, or by more than this ratio.
    max_unzipped_bytes: int = 256 * 1024 * 1024
    max_zip_ratio: float = 100.0
    # XML parts of a DOCX, inflated: python-docx walks them in Python, so 255 MB of XML took minutes. A
    # 500-page text-heavy document is 10-20 MB of XML.
    max_xml_bytes: int = 64 * 1024 * 1024
    # A PDF page with fewer non-blank characters than this in its text layer is treated as a scan.
    min_text_chars: int = 16
    # Legacy code page to prefer when a non-UTF-8 text file fits several equally well (see decode_text).
    preferred_encodings: tuple[str, ...] = ("cp1252",)

    def __post_init__(self) -> None:
        if self.max_bytes < 1 or self.max_pages < 1 or self.max_unzipped_bytes < 1 or self.max_xml_bytes < 1:
            raise ValueError(
                f"document limits must be positive: max_bytes={self.max_bytes}, max_pages={self.max_pages}, "
                f"max_unzipped_bytes={self.max_unzipped_bytes}"
            )
        if self.max_zip_ratio <= 1:
            raise ValueError(f"max_zip_ratio={self.max_zip_ratio} must be above 1")


def replace_page_text(doc: Document, texts: Mapping[int, str]) -> Document:
    """A copy of ``doc`` with the given pages' text replaced (e.g. OCR transcriptions); they no longer need OCR."""
    unknown = set(texts) - {p.number for p in doc.pages}
    if unknown:
        raise ValueError(f"pages {sorted(unknown)} are not in {doc.source} (1..{doc.page_count})")
    pages = tuple(
        replace(p, text=texts[p.number].strip(), needs_ocr=False) if p.number in texts else p for p in doc.pages
    )
    return replace(doc, pages=pages)

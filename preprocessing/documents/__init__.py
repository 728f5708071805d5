"""Document ingestion: PDF, DOCX, Markdown, HTML and plain text to page-numbered text.

``load_document(path, limits=...)`` returns a ``Document`` whose ``pages`` keep their 1-based page
numbers, so every summary, extracted value or label can point back to the pages it came from. A PDF page
without a text layer (a scan) is marked ``needs_ocr``; ``render_page`` turns it into an image within a
pixel budget for the vision model, and ``replace_page_text`` puts the transcription back. Every bad file
raises ``preprocessing.input_errors.InputError`` with a stable code: ``not_found``, ``unsupported_format``,
``file_too_large``, ``too_many_pages``, ``empty_document``, ``binary_text``, ``pdf_encrypted``,
``pdf_malformed``, ``docx_too_large``, ``docx_malformed``, ``page_out_of_range``.

Libraries, all permissively licensed and pure Python or wheels without system packages:
pypdf (BSD-3-Clause) reads PDF text per page without a native dependency; pypdfium2 (Apache-2.0 /
BSD-3-Clause, PDFium from Chromium) renders scanned pages, which pypdf cannot do; python-docx (MIT)
reads DOCX paragraphs, styles and tables in order; charset-normalizer (MIT) guesses the encoding of
text files that are not UTF-8; HTML goes through the standard library's ``html.parser``. The GPL/AGPL
alternatives (PyMuPDF, pdftotext/poppler) are avoided so the product stays Apache-2.0 throughout.
"""

from __future__ import annotations

from preprocessing.documents.load import (
    EXTENSIONS,
    content_hash,
    detect_format,
    hash_file,
    load_document,
    parse_document,
)
from preprocessing.documents.model import FORMATS, Document, DocumentLimits, Format, Page, replace_page_text
from preprocessing.documents.pdf import render_page

__all__ = [
    "EXTENSIONS",
    "FORMATS",
    "Document",
    "DocumentLimits",
    "Format",
    "Page",
    "content_hash",
    "detect_format",
    "hash_file",
    "load_document",
    "parse_document",
    "render_page",
    "replace_page_text",
]

"""Error codes of a document item's inputs (``preprocessing.documents``, ``worker.documents``).

Registered in the order below; ``vlbatch.errors`` re-exports each constant, and callers import it from there.
"""

from __future__ import annotations

from vlbatch.error_codes.registry import _define

UNSUPPORTED_FORMAT = _define(
    "unsupported_format",
    422,
    {"item"},
    "The input is in a format vlbatch does not read: a document extension other than PDF, DOCX, Markdown, HTML "
    "or text, or an image format outside the photo formats (JPEG, PNG, GIF, WebP, AVIF, HEIC/HEIF, JPEG XL, "
    "JPEG 2000, TIFF, PSD, BMP, MPO, camera RAW and a few more), such as SVG or EPS; the message says what "
    "to convert it to.",
)
FILE_TOO_LARGE = _define("file_too_large", 413, {"item"}, "The document is bigger than `VLBATCH_MAX_INPUT_BYTES`.")
EMPTY_DOCUMENT = _define(
    "empty_document",
    422,
    {"item"},
    "The document has no text to process (empty, no pages, or nothing left after skipped scans).",
)
BINARY_TEXT = _define(
    "binary_text",
    422,
    {"item"},
    "A text-format document holds binary data (NUL bytes, no encoding fits, or a PDF or zip inside).",
)
DOCX_MALFORMED = _define("docx_malformed", 422, {"item"}, "The DOCX file is not a readable Word document.")
DOCX_TOO_LARGE = _define(
    "docx_too_large", 413, {"item"}, "The DOCX file inflates past the unzipped-size or compression-ratio limit."
)
DOCX_ENCRYPTED = _define(
    "docx_encrypted",
    422,
    {"item"},
    "The DOCX is password-protected (an encrypted Office file); save an unprotected copy.",
)
PDF_MALFORMED = _define("pdf_malformed", 422, {"item"}, "The PDF file is not readable.")
PDF_ENCRYPTED = _define("pdf_encrypted", 422, {"item"}, "The PDF is password-protected; save an unprotected copy.")
TOO_MANY_PAGES = _define(
    "too_many_pages", 413, {"item"}, "The document has more pages than the page limit; split the file."
)
PAGE_OUT_OF_RANGE = _define("page_out_of_range", 422, {"item"}, "A page asked for is not in the document.")
CONTEXT_TOO_SMALL = _define(
    "context_too_small",
    422,
    {"item"},
    "The job's options leave no room for a document chunk within the engine's `max_model_len`; the message names "
    "the option to lower and the largest value that fits (`max_summary_chars` for `summarize`), or a longer context.",
)
PARSE_TIMEOUT = _define(
    "parse_timeout",
    422,
    {"item"},
    "Reading the document took longer than `VLBATCH_DOCUMENT_PARSE_TIMEOUT_S`; its parser was stopped.",
)
PARSE_MEMORY = _define(
    "parse_memory",
    413,
    {"item"},
    "Reading the document needs more memory than `VLBATCH_DOCUMENT_PARSE_MEMORY_MB` (e.g. a stream that inflates "
    "to gigabytes).",
)
PARSE_CRASHED = _define(
    "parse_crashed",
    422,
    {"item"},
    "The document's parser died (a signal such as SIGSEGV or SIGABRT) on this file, or its worker died while "
    "reading it as often as `worker/documents.py` allows.",
)
DOCUMENT_ERROR = _define(
    "document_error", 500, {"item"}, "Processing the document failed unexpectedly; the worker log has the traceback."
)

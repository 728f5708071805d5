"""Error codes of the OpenAI-compatible files and batches (``pipelines.openai_batch``, ``api.routes.files``,
``api.routes.batches``).

Registered in the order below; ``vlbatch.errors`` re-exports each constant, and callers import it from there.
"""

from __future__ import annotations

from vlbatch.error_codes.registry import _define

INVALID_BATCH_LINE = _define(
    "invalid_batch_line",
    422,
    {"item", "cli"},
    "A batch input line is not a valid request (not JSON, an unknown or bad field, `stream: true`, `n > 1`); "
    "the message names the line and the field.",
)
DUPLICATE_CUSTOM_ID = _define(
    "duplicate_custom_id", 422, {"item", "cli"}, "A batch input line repeats the `custom_id` of an earlier line."
)
MISMATCHED_ENDPOINT = _define(
    "mismatched_endpoint", 422, {"item", "cli"}, "A batch input line's `url` is not the batch's endpoint."
)
BATCH_EXPIRED = _define("batch_expired", 408, {"item"}, "The batch's completion window ended before this request ran.")
BATCH_CANCELLED = _define("batch_cancelled", 409, {"item"}, "The batch was cancelled before this request ran.")
INVALID_BATCH = _define(
    "invalid_batch",
    422,
    {"api", "cli"},
    "The batch cannot be created as asked (endpoint, completion window, input file purpose, or no request in it).",
)
BATCH_LINE_TOO_LONG = _define(
    "batch_line_too_long",
    413,
    {"item", "cli"},
    "A batch input line is longer than `VLBATCH_MAX_BATCH_LINE_BYTES`; the line fails, the others run.",
)
TOO_MANY_BATCH_LINES = _define(
    "too_many_batch_lines", 422, {"api"}, "The batch input file has more request lines than `VLBATCH_MAX_BATCH_LINES`."
)
INVALID_FILE_NAME = _define(
    "invalid_file_name",
    422,
    {"api"},
    "The uploaded file's name is empty, longer than 255 characters, not UTF-8, or holds NUL, a control character "
    "or a slash.",
)
FILE_CONTENT_MISSING = _define(
    "file_content_missing",
    410,
    {"api"},
    "The file's record exists but its bytes are not in this API's `VLBATCH_DATA_DIR` (removed, or an API replica "
    "with a data dir of its own: every replica must share one); upload the file again.",
)
UPLOAD_TOO_LARGE = _define(
    "upload_too_large", 413, {"api"}, "The uploaded file is bigger than `VLBATCH_MAX_UPLOAD_BYTES`."
)
REQUEST_TOO_LARGE = _define(
    "request_too_large", 413, {"api"}, "The request body is bigger than `VLBATCH_MAX_REQUEST_BYTES`."
)
TOO_MANY_HEADERS = _define(
    "too_many_headers", 431, {"api"}, "The request carries more header fields than `VLBATCH_HTTP_MAX_HEADERS`."
)
DATABASE_UNAVAILABLE = _define(
    "database_unavailable",
    503,
    {"api", "cli", "worker"},
    "The database cannot be reached or written (down, read-only, or the SQLite file was removed or replaced); "
    "nothing was stored, retry once `/readyz` says ready.",
    retryable=True,
)
FILE_NOT_FOUND = _define("file_not_found", 404, {"api"}, "No file has this id.")
BATCH_NOT_FOUND = _define("batch_not_found", 404, {"api"}, "No batch has this id.")
BATCH_FINISHED = _define("batch_finished", 409, {"api"}, "The batch has ended already; there is nothing to cancel.")
INVALID_EXPIRY = _define(
    "invalid_expiry",
    422,
    {"api"},
    "A batch's `output_expires_after` or a file's `expires_after` is not OpenAI's shape: anchor `created_at` and "
    "`seconds` from 3600 (1 hour) to 2592000 (30 days).",
)

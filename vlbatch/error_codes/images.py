"""Error codes of an image item's inputs: decoding, size limits, confinement, fetching
(``preprocessing.images``, ``worker.image_prep``).

Registered in the order below; ``vlbatch.errors`` re-exports each constant, and callers import it from there.
"""

from __future__ import annotations

from vlbatch.error_codes.registry import _define

DECODE_ERROR = _define(
    "decode_error",
    422,
    {"item"},
    "The image bytes do not decode (truncated, corrupt beyond what a viewer shows, or not an image).",
)
FILE_NAME_NOT_UTF8 = _define(
    "file_name_not_utf8",
    422,
    {"item"},
    "The file's name is not UTF-8 (old cameras and zip archives make such names; the item shows it with `\\x` "
    "escapes): rename it, e.g. `convmv -f latin1 -t utf8 --notest`, and submit it again. The other files run.",
)
EMPTY_FILE = _define("empty_file", 422, {"item"}, "The image file or data URL holds no bytes.")
TOO_LARGE = _define("too_large", 413, {"item"}, "The image is bigger than `VLBATCH_MAX_INPUT_BYTES`.")
IMAGE_BOMB = _define(
    "image_bomb", 413, {"item"}, "The image declares more pixels than the decompression-bomb guard allows."
)
NOT_FOUND = _define("not_found", 422, {"item"}, "No such input file (or HTTP 404 for an image URL).")
FETCH_ERROR = _define(
    "fetch_error",
    502,
    {"item"},
    "An image URL or file could not be read (network error, HTTP error, I/O error; an `s3://` object: the store's "
    "error code only, its message is in the worker's log).",
    retryable=True,
)
OUTSIDE_ROOTS = _define(
    "outside_roots",
    422,
    {"item"},
    "The input path lies outside the input roots of the job's tenant (`vlbatch keys roots`; by default "
    "`VLBATCH_ALLOWED_INPUT_ROOTS`; an `s3://` key: outside the tenant's object-store prefixes, by default "
    "`VLBATCH_ALLOWED_S3_PREFIXES`); the message names no root or prefix.",
)
URL_FORBIDDEN = _define(
    "url_forbidden",
    422,
    {"item"},
    "The image URL is refused before any connection: not http(s), carries credentials, or its host resolves to a "
    "loopback, private, link-local, reserved or other non-public address (`VLBATCH_URL_ALLOW_NETWORKS` and "
    "`VLBATCH_URL_ALLOW_HOSTS` open them); checked again on every redirect.",
)
NOT_REGULAR_FILE = _define(
    "not_regular_file",
    422,
    {"item"},
    "The input path is a directory, FIFO, socket or device, not a regular file; it is refused without reading it.",
)
UNSUPPORTED_SOURCE = _define(
    "unsupported_source", 422, {"item"}, "The image source is not a path, an http(s) URL or a base64 `data:image/` URL."
)
BAD_ASPECT_RATIO = _define(
    "bad_aspect_ratio", 422, {"item"}, "The image is 200 or more times wider than tall (or taller than wide)."
)
NO_IMAGES = _define("no_images", 422, {"item"}, "An image item lists no images.")
TOO_MANY_IMAGES = _define(
    "too_many_images", 422, {"item"}, "An item has more images than the pipeline's or the engine's per-prompt limit."
)
MODEL_HAS_NO_VISION = _define(
    "model_has_no_vision",
    422,
    {"item"},
    "The served model's chat template takes no images, so an image item cannot run on it.",
)
PREPROCESS_ERROR = _define(
    "preprocess_error",
    500,
    {"item"},
    "Decoding or resizing the item's images failed unexpectedly; the worker log has the traceback.",
)
DECODE_TIMEOUT = _define(
    "decode_timeout",
    422,
    {"item"},
    "Decoding the image took longer than `VLBATCH_IMAGE_DECODE_TIMEOUT_S` in its decoder process, which was stopped "
    "(`VLBATCH_IMAGE_DECODE_ISOLATION=process`).",
)
DECODE_MEMORY = _define(
    "decode_memory",
    413,
    {"item"},
    "Decoding the image needs more memory than `VLBATCH_IMAGE_DECODE_MEMORY_MB` in its decoder process "
    "(`VLBATCH_IMAGE_DECODE_ISOLATION=process`).",
)
DECODE_CRASHED = _define(
    "decode_crashed",
    422,
    {"item"},
    "The image decoder died (a signal such as SIGSEGV or SIGABRT) on this file; the worker went on "
    "(`VLBATCH_IMAGE_DECODE_ISOLATION=process`).",
)

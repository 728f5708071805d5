"""The one root of vlbatch's exceptions and the one registry of its error codes.

Every exception the project raises on purpose is a :class:`VlbatchError`: a stable, machine-readable ``code``
and a ``message`` for humans that names the bad value and the fix. ``CODES`` says for each code what it
means, whether trying again unchanged can succeed, the HTTP status the API answers with, and where the code
shows up: on a failed item (``items.error_code``), in an API error body, in the worker's log, or in the CLI's
``error <code>: <message>`` line. Callers use the constants below, never loose strings; an unknown code fails
loudly (``lookup``), when a class is defined or an error is raised, not later in a stored row.

Standard library only: every package (preprocessing and kernels included) may import this module.
``python -m vlbatch.error_docs`` prints the README's table of codes; ``--readme README.md`` rewrites it there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

Use = Literal["item", "api", "worker", "cli"]
USES: tuple[Use, ...] = ("item", "api", "worker", "cli")


@dataclass(frozen=True, slots=True)
class ErrorCode:
    code: str
    meaning: str
    retryable: bool  # the same request or item, unchanged, may succeed later
    http_status: int  # what the API answers when this error reaches it
    used_in: frozenset[Use]


_CODES: dict[str, ErrorCode] = {}
CODES: Mapping[str, ErrorCode] = MappingProxyType(_CODES)


def _define(code: str, http_status: int, used_in: set[Use], meaning: str, *, retryable: bool = False) -> str:
    if code in _CODES:
        raise ValueError(f"error code {code!r} is defined twice")
    _CODES[code] = ErrorCode(code, meaning, retryable, http_status, frozenset(used_in))
    return code


def lookup(code: str) -> ErrorCode:
    """The registry entry of ``code``; ``KeyError`` naming the known codes when there is none."""
    try:
        return _CODES[code]
    except KeyError:
        raise KeyError(
            f"unknown error code {code!r}; register it in vlbatch/errors.py (known: {sorted(_CODES)})"
        ) from None


# ---- an image item's inputs (preprocessing.images, worker.image_items) ------------------------------------------
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
    "An image URL or file could not be read (network error, HTTP error, I/O error).",
    retryable=True,
)
OUTSIDE_ROOTS = _define(
    "outside_roots",
    422,
    {"item"},
    "The input path lies outside the input roots of the job's tenant (`vlbatch keys roots`; by default "
    "`VLBATCH_ALLOWED_INPUT_ROOTS`; an `s3://` key: outside `VLBATCH_ALLOWED_S3_PREFIXES`).",
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

# ---- a video item's inputs (preprocessing.video, worker.image_items) ---------------------------------------------
VIDEO_DECODE_ERROR = _define(
    "video_decode_error",
    422,
    {"item"},
    "The video file does not open or decode (corrupt, or not a video container).",
)
VIDEO_TRUNCATED = _define(
    "video_truncated", 422, {"item"}, "The video's data ends well before the duration its header declares."
)
VIDEO_NO_STREAM = _define("video_no_stream", 422, {"item"}, "The file holds no video stream (audio only, or data).")
VIDEO_TOO_LONG = _define("video_too_long", 413, {"item"}, "The video is longer than `VLBATCH_MAX_VIDEO_SECONDS`.")
VIDEO_TOO_LARGE = _define(
    "video_too_large",
    413,
    {"item"},
    "The video's frame size or file size is above `VLBATCH_MAX_VIDEO_PIXELS` or `VLBATCH_MAX_VIDEO_BYTES`.",
)
VIDEO_TIMEOUT = _define(
    "video_timeout",
    422,
    {"item"},
    "Choosing and decoding the video's frames took longer than `VLBATCH_VIDEO_DECODE_TIMEOUT_S`.",
)
VIDEO_NOT_SUPPORTED = _define(
    "video_not_supported",
    422,
    {"item"},
    "The job's pipeline takes no video, or a video shares its item with other inputs (a video is an item alone).",
)

# ---- a document item's inputs (preprocessing.documents, worker.documents) ----------------------------------------
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
    "The job's options leave no room for a document chunk within the engine's `max_model_len`.",
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

# ---- the model's answer and the engine ---------------------------------------------------------------------------
PARSE_ERROR = _define("parse_error", 502, {"item"}, "The model's answer is not the JSON the pipeline expects.")
OUTPUT_TRUNCATED = _define(
    "output_truncated",
    502,
    {"item"},
    "Generation stopped at max_tokens before the JSON answer closed; raise the pipeline's output limits.",
)
ENGINE_REJECTED = _define(
    "engine_rejected", 422, {"item"}, "The engine refused the request (e.g. a prompt longer than `max_model_len`)."
)
ENGINE_CRASH = _define(
    "engine_crash", 500, {"item", "worker"}, "The engine crashed on this item every time it ran (retried alone first)."
)
ENGINE_CANARY_FAILED = _define(
    "engine_canary_failed",
    503,
    {"api", "worker", "cli"},
    "The engine crashed or hung on the worker's canary (one small image and one text request after a load), or"
    " crashed on several items in a row: the deployment is broken, not the items. Nothing is claimed; the items"
    " stay queued.",
    retryable=True,
)
ENGINE_STOPPED = _define(
    "engine_stopped",
    503,
    {"worker"},
    "The engine was shut down with requests still queued or running; the work goes back to the queue.",
    retryable=True,
)

# ---- jobs and their pipelines ------------------------------------------------------------------------------------
UNKNOWN_PIPELINE = _define("unknown_pipeline", 422, {"item", "api"}, "The job names a pipeline that is not registered.")
INVALID_OPTIONS = _define("invalid_options", 422, {"item", "api"}, "The job's options are not valid for its pipeline.")
INVALID_SCHEMA = _define(
    "invalid_schema",
    422,
    {"api", "cli"},
    "The extract schema cannot drive an extraction (within job options it shows as `invalid_options`).",
)
INVALID_PIPELINE = _define(
    "invalid_pipeline",
    500,
    {"worker", "cli"},
    "A pipeline is declared incompletely or twice, or one of the other kind was asked for.",
)
INVALID_ITEMS = _define(
    "invalid_items",
    422,
    {"api"},
    "The job's items do not fit its pipeline's kind (images for image pipelines, paths for document ones).",
)
INVALID_REQUEST = _define(
    "invalid_request",
    422,
    {"api"},
    "The request's body, query or headers do not fit the route's schema (a missing or unknown field, a wrong type,"
    " a value past its cap, NUL or a lone surrogate in a string); `detail` lists the faults or names the one.",
)
UNPARSABLE_BODY = _define(
    "unparsable_body",
    400,
    {"api"},
    "The request body cannot be parsed as its content type says (JSON nested too deep, or a broken multipart).",
)
IDEMPOTENCY_KEY_REUSED = _define(
    "idempotency_key_reused",
    409,
    {"api"},
    "The Idempotency-Key was used before with another body or route; a retry must repeat the request exactly.",
)
WRONG_PIPELINE_KIND = _define("wrong_pipeline_kind", 422, {"api"}, "The route takes pipelines of the other kind.")
NO_MODEL = _define("no_model", 422, {"api"}, "No model was given and none is configured (`VLBATCH_MODEL_PATH`).")
TOO_MANY_ITEMS = _define(
    "too_many_items",
    422,
    {"api"},
    "The job has more items than `VLBATCH_MAX_ITEMS_PER_JOB`, or the request lists more inline items than "
    "`VLBATCH_MAX_ITEMS_PER_REQUEST`.",
)
DEADLINE_UNMEETABLE = _define(
    "deadline_unmeetable",
    422,
    {"api", "cli"},
    "The job's `deadline` is before the finish its estimate expects, and `strict_deadline` asked to refuse it "
    "rather than accept it with a warning.",
)
NO_INPUTS = _define("no_inputs", 422, {"api", "cli"}, "The folder holds no input files the job could take.")
INPUT_PATH_REFUSED = _define(
    "input_path_refused",
    422,
    {"api", "cli", "worker"},
    "The folder or file asked for is missing, or outside the tenant's roots (`vlbatch keys roots`; by default "
    "`VLBATCH_ALLOWED_INPUT_ROOTS`; an `s3://` folder: outside `VLBATCH_ALLOWED_S3_PREFIXES`, or the store refused "
    "the listing); the answer names no root.",
)
INVALID_TENANT_ROOTS = _define(
    "invalid_tenant_roots",
    422,
    {"cli"},
    "A tenant's roots (`vlbatch keys roots`) must be absolute folders inside `VLBATCH_ALLOWED_INPUT_ROOTS`.",
)
MODEL_NOT_SERVED = _define(
    "model_not_served",
    409,
    {"api"},
    "Workers are live but none serves the job's model (`VLBATCH_MODEL_NOT_SERVED=refuse`; by default the job is "
    "made with a warning): check the model name (`GET /v1/queues`), or start a worker for it.",
    retryable=True,
)
JOB_NOT_FOUND = _define("job_not_found", 404, {"api"}, "No job has this id.")
JOB_STATE_CONFLICT = _define(
    "job_state_conflict",
    409,
    {"api"},
    "The job's state does not allow this: only a queued or running job pauses, only a paused one resumes, "
    "a finished or cancelled job cannot be cancelled.",
)
BATCH_OWNED_JOB = _define(
    "batch_owned_job",
    409,
    {"api"},
    "The job runs the lines of an OpenAI batch: it is cancelled and read through `/v1/batches/{id}`, not driven "
    "through `/v1/jobs` (cancel, pause, resume, rerun, retry).",
)
QUEUE_STATE_CONFLICT = _define(
    "queue_state_conflict", 409, {"api"}, "Only a running queue pauses and only a paused one resumes."
)
ITEM_NOT_FOUND = _define("item_not_found", 404, {"api"}, "The job has no item with this id.")
NO_RESULT_TO_TAG = _define(
    "no_result_to_tag", 409, {"api"}, "The item has no result yet; tags are edited on an item's result."
)
TOO_MANY_MANUAL_TAGS = _define(
    "too_many_manual_tags",
    409,
    {"api"},
    "The edit would leave the result with more tags added or removed by hand than `VLBATCH_MAX_MANUAL_TAGS`.",
)
NOTHING_TO_RERUN = _define("nothing_to_rerun", 409, {"api"}, "The job has no items the rerun scope selects.")
BAD_CURSOR = _define("bad_cursor", 422, {"api"}, "The page cursor is not one the API handed out.")
INVALID_TEMPLATE = _define(
    "invalid_template",
    422,
    {"cli", "worker"},
    "A job template cannot be created or run as given (cron, options, folder or name).",
)

# ---- OpenAI-compatible files and batches (pipelines.openai_batch, api.routes.files, api.routes.batches) ------------
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
DATABASE_UNAVAILABLE = _define(
    "database_unavailable",
    503,
    {"api"},
    "The database cannot be reached or written (down, read-only, or the SQLite file was removed or replaced); "
    "nothing was stored, retry once `/readyz` says ready.",
    retryable=True,
)
FILE_NOT_FOUND = _define("file_not_found", 404, {"api"}, "No file has this id.")
BATCH_NOT_FOUND = _define("batch_not_found", 404, {"api"}, "No batch has this id.")
BATCH_FINISHED = _define("batch_finished", 409, {"api"}, "The batch has ended already; there is nothing to cancel.")

# ---- access: API keys, tenants, quotas (api.deps, jobs.quotas, vlbatch.db.keys) ----------------------------------
UNAUTHORIZED = _define(
    "unauthorized",
    401,
    {"api"},
    "No API key, or the key is unknown or revoked; send `Authorization: Bearer <key>` or `X-API-Key: <key>` "
    "(keys come from `vlbatch keys create`).",
)
ADMIN_REQUIRED = _define(
    "admin_required", 403, {"api"}, "The route takes an admin key (`vlbatch keys create --admin`)."
)
CROSS_SITE_REFUSED = _define(
    "cross_site_refused",
    403,
    {"api"},
    "A browser sent a state-changing request from another site (`Sec-Fetch-Site`); the API takes none.",
)
ITEMS_QUOTA_EXCEEDED = _define(
    "items_quota_exceeded",
    413,
    {"api"},
    "The job has more items than the tenant's quota (`VLBATCH_TENANT_MAX_ITEMS_PER_JOB` or `VLBATCH_TENANT_QUOTAS`).",
)
ACTIVE_JOBS_QUOTA_EXCEEDED = _define(
    "active_jobs_quota_exceeded",
    429,
    {"api"},
    "The tenant has as many unfinished jobs as its quota allows (`VLBATCH_TENANT_MAX_ACTIVE_JOBS`); retry when "
    "one finishes or cancel one.",
    retryable=True,
)
UPLOAD_QUOTA_EXCEEDED = _define(
    "upload_quota_exceeded",
    413,
    {"api"},
    "The upload is bigger than the tenant's quota (`VLBATCH_TENANT_MAX_UPLOAD_BYTES` or `VLBATCH_TENANT_QUOTAS`).",
)
KEY_NOT_FOUND = _define("key_not_found", 404, {"cli"}, "No API key has this id.")

# ---- devices, planning, tools ------------------------------------------------------------------------------------
DEVICE_TOOL_MISSING = _define(
    "device_tool_missing",
    503,
    {"worker", "cli"},
    "The platform's device tool (npu-smi, nvidia-smi) is not installed or not mounted into the container.",
)
DEVICE_DISCOVERY_FAILED = _define(
    "device_discovery_failed",
    503,
    {"worker", "cli"},
    "The platform's device tool failed or printed something unreadable.",
    retryable=True,
)
PLATFORM_REFUSAL = _define(
    "platform_refusal", 422, {"worker", "cli"}, "A setting contradicts what the device platform supports."
)
NO_CHAT_TEMPLATE = _define(
    "no_chat_template", 500, {"worker", "cli"}, "The model directory has no usable chat template."
)
MODEL_CONFIG_INVALID = _define(
    "model_config_invalid",
    422,
    {"cli"},
    "The model's config.json is missing, unreadable, or lacks a field the planner needs.",
)
PLAN_IMPOSSIBLE = _define(
    "plan_impossible", 422, {"cli"}, "The launch plan does not fit the devices or contradicts the platform."
)
QUANTIZE_REFUSED = _define(
    "quantize_refused", 422, {"cli"}, "The model, calibration set or kernel argument cannot be quantized as asked."
)
INVALID_SWEEP = _define(
    "invalid_sweep", 422, {"cli"}, "`vlbatch bench --sweep` is not `PARAM=V1,V2,...` with a sweepable parameter."
)
UNKNOWN_ARM = _define("unknown_arm", 422, {"cli"}, "`vlbatch bench --arms` names an arm that does not exist.")
BAD_LABELS = _define(
    "bad_labels",
    422,
    {"cli"},
    "`vlbatch eval`: the labels file is unreadable, or a record lacks a path or has a bad field.",
)
REMOTE_ERROR = _define(
    "remote_error",
    502,
    {"cli"},
    "`vlbatch jobs` could not reach the API at `VLBATCH_API_URL`, or the API refused the request (its code follows).",
    retryable=True,
)
XMP_ERROR = _define(
    "xmp_error",
    422,
    {"cli"},
    "`vlbatch xmp` cannot write a photo's XMP: the JPEG copy's headers are malformed or the packet is too big.",
)
INTERNAL_ERROR = _define(
    "internal_error", 500, {"api"}, "An unexpected failure inside vlbatch; the log has the traceback."
)


class VlbatchError(Exception):
    """Root of every error vlbatch raises on purpose. ``code`` is a key of ``CODES``; ``message`` is for humans.

    A subclass sets its default ``code``; one raise may pass another (``code=``). Instances pickle whatever
    the subclass's constructor takes (they cross process boundaries).
    """

    code: str = INTERNAL_ERROR

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        lookup(cls.code)  # a class with an unregistered default code fails at import

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.code = lookup(code).code if code is not None else type(self).code
        self.message = message

    def __reduce__(self) -> tuple[Any, ...]:
        return (_restore, (type(self), self.args, self.__dict__))


def _restore(cls: type[VlbatchError], args: tuple[Any, ...], state: dict[str, Any]) -> VlbatchError:
    """Unpickle without calling ``__init__``, whose signature differs per subclass."""
    exc = cls.__new__(cls, *args)
    exc.args = args
    exc.__dict__.update(state)
    return exc

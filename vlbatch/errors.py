"""The one root of vlbatch's exceptions and the one registry of its error codes.

Every exception the project raises on purpose is a :class:`VlbatchError`: a stable, machine-readable ``code``
and a ``message`` for humans that names the bad value and the fix. ``CODES`` says for each code what it
means, whether trying again unchanged can succeed, the HTTP status the API answers with, and where the code
shows up: on a failed item (``items.error_code``), in an API error body, in the worker's log, or in the CLI's
``error <code>: <message>`` line. Callers use the constants below, never loose strings; an unknown code fails
loudly (``lookup``), when a class is defined or an error is raised, not later in a stored row.

The codes are defined by area in :mod:`vlbatch.error_codes` (one module per area: ``images``, ``video``,
``documents``, ``engine``, ``jobs``, ``batches``, ``access``, ``tools``, ``webhooks``; the mechanism in
``registry``) and this module re-exports each constant by name: import them from here. A new code is registered in
its area's module and re-exported below.

Standard library only: every package (preprocessing and kernels included) may import this module.
``python -m vlbatch.error_docs`` prints the docs' table of codes (docs/error-codes.md); ``python -m cli.docs_pages``
rewrites it there.
"""

from __future__ import annotations

from typing import Any

from vlbatch.error_codes.access import (
    ACTIVE_JOBS_QUOTA_EXCEEDED,
    ADMIN_REQUIRED,
    CROSS_SITE_REFUSED,
    DRY_RUN_BUSY,
    ITEMS_QUOTA_EXCEEDED,
    KEY_NOT_FOUND,
    UNAUTHORIZED,
    UPLOAD_QUOTA_EXCEEDED,
    UPLOADS_HELD_QUOTA_EXCEEDED,
)
from vlbatch.error_codes.batches import (
    BATCH_CANCELLED,
    BATCH_EXPIRED,
    BATCH_FINISHED,
    BATCH_LINE_TOO_LONG,
    BATCH_NOT_FOUND,
    DATABASE_UNAVAILABLE,
    DUPLICATE_CUSTOM_ID,
    FILE_CONTENT_MISSING,
    FILE_NOT_FOUND,
    INVALID_BATCH,
    INVALID_BATCH_LINE,
    INVALID_EXPIRY,
    INVALID_FILE_NAME,
    MISMATCHED_ENDPOINT,
    REQUEST_TOO_LARGE,
    TOO_MANY_BATCH_LINES,
    TOO_MANY_HEADERS,
    UPLOAD_TOO_LARGE,
)
from vlbatch.error_codes.documents import (
    BINARY_TEXT,
    CONTEXT_TOO_SMALL,
    DOCUMENT_ERROR,
    DOCX_ENCRYPTED,
    DOCX_MALFORMED,
    DOCX_TOO_LARGE,
    EMPTY_DOCUMENT,
    FILE_TOO_LARGE,
    PAGE_OUT_OF_RANGE,
    PARSE_CRASHED,
    PARSE_MEMORY,
    PARSE_TIMEOUT,
    PDF_ENCRYPTED,
    PDF_MALFORMED,
    TOO_MANY_PAGES,
    UNSUPPORTED_FORMAT,
)
from vlbatch.error_codes.engine import (
    ANSWER_LANGUAGE_MISMATCH,
    CONTEXT_OVER_MODEL,
    ENGINE_CANARY_FAILED,
    ENGINE_CRASH,
    ENGINE_LOAD_FAILED,
    ENGINE_REJECTED,
    ENGINE_STOPPED,
    KV_CACHE_OVER_MEMORY,
    KV_CACHE_TOO_SMALL,
    OUTPUT_TRUNCATED,
    PARSE_ERROR,
)
from vlbatch.error_codes.images import (
    BAD_ASPECT_RATIO,
    DECODE_CRASHED,
    DECODE_ERROR,
    DECODE_MEMORY,
    DECODE_TIMEOUT,
    EMPTY_FILE,
    FETCH_ERROR,
    FILE_NAME_NOT_UTF8,
    IMAGE_BOMB,
    MODEL_HAS_NO_VISION,
    NO_IMAGES,
    NOT_FOUND,
    NOT_REGULAR_FILE,
    OUTSIDE_ROOTS,
    PREPROCESS_ERROR,
    TOO_LARGE,
    TOO_MANY_IMAGES,
    UNSUPPORTED_SOURCE,
    URL_FORBIDDEN,
)
from vlbatch.error_codes.jobs import (
    BAD_CURSOR,
    BATCH_OWNED_JOB,
    DEADLINE_UNMEETABLE,
    IDEMPOTENCY_KEY_REUSED,
    INPUT_PATH_REFUSED,
    INVALID_ITEMS,
    INVALID_OPTIONS,
    INVALID_PIPELINE,
    INVALID_REQUEST,
    INVALID_SCHEMA,
    INVALID_TEMPLATE,
    INVALID_TENANT_ROOTS,
    ITEM_LINE_TOO_LONG,
    ITEM_NOT_FOUND,
    JOB_NOT_FOUND,
    JOB_STATE_CONFLICT,
    MODEL_NOT_SERVED,
    NO_INPUTS,
    NO_MODEL,
    NO_RESULT_TO_TAG,
    NOTHING_TO_RERUN,
    QUEUE_STATE_CONFLICT,
    TOO_MANY_ITEMS,
    TOO_MANY_MANUAL_TAGS,
    UNKNOWN_PIPELINE,
    UNPARSABLE_BODY,
    WRONG_PIPELINE_KIND,
)
from vlbatch.error_codes.registry import CODES, USES, ErrorCode, Use, lookup
from vlbatch.error_codes.tools import (
    BAD_LABELS,
    BROKER_UNAVAILABLE,
    DATABASE_LOGIN_REFUSED,
    DEVICE_DISCOVERY_FAILED,
    DEVICE_TOOL_MISSING,
    INTERNAL_ERROR,
    INVALID_SETTINGS,
    INVALID_SWEEP,
    JANITOR_BUSY,
    MODEL_CONFIG_INVALID,
    NO_CHAT_TEMPLATE,
    PLAN_IMPOSSIBLE,
    PLATFORM_REFUSAL,
    QUANTIZE_REFUSED,
    REMOTE_ERROR,
    UNKNOWN_ARM,
    XMP_ERROR,
)
from vlbatch.error_codes.video import (
    VIDEO_DECODE_ERROR,
    VIDEO_NO_STREAM,
    VIDEO_NOT_SUPPORTED,
    VIDEO_TIMEOUT,
    VIDEO_TOO_LARGE,
    VIDEO_TOO_LONG,
    VIDEO_TRUNCATED,
)
from vlbatch.error_codes.webhooks import (
    INVALID_WEBHOOK,
    WEBHOOK_DELIVERY_NOT_FOUND,
    WEBHOOK_ENDPOINT_DISABLED,
    WEBHOOK_HTTP_ERROR,
    WEBHOOK_NOT_FOUND,
    WEBHOOK_REDIRECT_REFUSED,
    WEBHOOK_UNREACHABLE,
    WEBHOOK_URL_REFUSED,
)

# The constants of every area, the registry's mechanism and the root exception: what callers import from here.
__all__ = [
    "ACTIVE_JOBS_QUOTA_EXCEEDED",
    "ADMIN_REQUIRED",
    "ANSWER_LANGUAGE_MISMATCH",
    "BAD_ASPECT_RATIO",
    "BAD_CURSOR",
    "BAD_LABELS",
    "BATCH_CANCELLED",
    "BATCH_EXPIRED",
    "BATCH_FINISHED",
    "BATCH_LINE_TOO_LONG",
    "BATCH_NOT_FOUND",
    "BATCH_OWNED_JOB",
    "BINARY_TEXT",
    "BROKER_UNAVAILABLE",
    "CODES",
    "CONTEXT_OVER_MODEL",
    "CONTEXT_TOO_SMALL",
    "CROSS_SITE_REFUSED",
    "DATABASE_LOGIN_REFUSED",
    "DATABASE_UNAVAILABLE",
    "DEADLINE_UNMEETABLE",
    "DECODE_CRASHED",
    "DECODE_ERROR",
    "DECODE_MEMORY",
    "DECODE_TIMEOUT",
    "DEVICE_DISCOVERY_FAILED",
    "DEVICE_TOOL_MISSING",
    "DOCUMENT_ERROR",
    "DOCX_ENCRYPTED",
    "DOCX_MALFORMED",
    "DOCX_TOO_LARGE",
    "DRY_RUN_BUSY",
    "DUPLICATE_CUSTOM_ID",
    "EMPTY_DOCUMENT",
    "EMPTY_FILE",
    "ENGINE_CANARY_FAILED",
    "ENGINE_CRASH",
    "ENGINE_LOAD_FAILED",
    "ENGINE_REJECTED",
    "ENGINE_STOPPED",
    "FETCH_ERROR",
    "FILE_CONTENT_MISSING",
    "FILE_NAME_NOT_UTF8",
    "FILE_NOT_FOUND",
    "FILE_TOO_LARGE",
    "IDEMPOTENCY_KEY_REUSED",
    "IMAGE_BOMB",
    "INPUT_PATH_REFUSED",
    "INTERNAL_ERROR",
    "INVALID_BATCH",
    "INVALID_BATCH_LINE",
    "INVALID_EXPIRY",
    "INVALID_FILE_NAME",
    "INVALID_ITEMS",
    "INVALID_OPTIONS",
    "INVALID_PIPELINE",
    "INVALID_REQUEST",
    "INVALID_SCHEMA",
    "INVALID_SETTINGS",
    "INVALID_SWEEP",
    "INVALID_TEMPLATE",
    "INVALID_TENANT_ROOTS",
    "INVALID_WEBHOOK",
    "ITEMS_QUOTA_EXCEEDED",
    "ITEM_LINE_TOO_LONG",
    "ITEM_NOT_FOUND",
    "JANITOR_BUSY",
    "JOB_NOT_FOUND",
    "JOB_STATE_CONFLICT",
    "KEY_NOT_FOUND",
    "KV_CACHE_OVER_MEMORY",
    "KV_CACHE_TOO_SMALL",
    "MISMATCHED_ENDPOINT",
    "MODEL_CONFIG_INVALID",
    "MODEL_HAS_NO_VISION",
    "MODEL_NOT_SERVED",
    "NOTHING_TO_RERUN",
    "NOT_FOUND",
    "NOT_REGULAR_FILE",
    "NO_CHAT_TEMPLATE",
    "NO_IMAGES",
    "NO_INPUTS",
    "NO_MODEL",
    "NO_RESULT_TO_TAG",
    "OUTPUT_TRUNCATED",
    "OUTSIDE_ROOTS",
    "PAGE_OUT_OF_RANGE",
    "PARSE_CRASHED",
    "PARSE_ERROR",
    "PARSE_MEMORY",
    "PARSE_TIMEOUT",
    "PDF_ENCRYPTED",
    "PDF_MALFORMED",
    "PLAN_IMPOSSIBLE",
    "PLATFORM_REFUSAL",
    "PREPROCESS_ERROR",
    "QUANTIZE_REFUSED",
    "QUEUE_STATE_CONFLICT",
    "REMOTE_ERROR",
    "REQUEST_TOO_LARGE",
    "TOO_LARGE",
    "TOO_MANY_BATCH_LINES",
    "TOO_MANY_HEADERS",
    "TOO_MANY_IMAGES",
    "TOO_MANY_ITEMS",
    "TOO_MANY_MANUAL_TAGS",
    "TOO_MANY_PAGES",
    "UNAUTHORIZED",
    "UNKNOWN_ARM",
    "UNKNOWN_PIPELINE",
    "UNPARSABLE_BODY",
    "UNSUPPORTED_FORMAT",
    "UNSUPPORTED_SOURCE",
    "UPLOADS_HELD_QUOTA_EXCEEDED",
    "UPLOAD_QUOTA_EXCEEDED",
    "UPLOAD_TOO_LARGE",
    "URL_FORBIDDEN",
    "USES",
    "VIDEO_DECODE_ERROR",
    "VIDEO_NOT_SUPPORTED",
    "VIDEO_NO_STREAM",
    "VIDEO_TIMEOUT",
    "VIDEO_TOO_LARGE",
    "VIDEO_TOO_LONG",
    "VIDEO_TRUNCATED",
    "WEBHOOK_DELIVERY_NOT_FOUND",
    "WEBHOOK_ENDPOINT_DISABLED",
    "WEBHOOK_HTTP_ERROR",
    "WEBHOOK_NOT_FOUND",
    "WEBHOOK_REDIRECT_REFUSED",
    "WEBHOOK_UNREACHABLE",
    "WEBHOOK_URL_REFUSED",
    "WRONG_PIPELINE_KIND",
    "XMP_ERROR",
    "ErrorCode",
    "Use",
    "VlbatchError",
    "lookup",
]


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

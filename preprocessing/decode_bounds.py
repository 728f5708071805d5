"""Images decoded in sandbox children (``preprocessing.documents.sandbox``): the limits and the codes they share.

Two callers decode clients' images there: the worker (``worker.image_decode``, under
``VLBATCH_IMAGE_DECODE_ISOLATION=process``) and the API's dashboard thumbnails (``api.thumbnails``, always). Both
use the same address-space cap and deadline (``VLBATCH_IMAGE_DECODE_MEMORY_MB``, ``VLBATCH_IMAGE_DECODE_TIMEOUT_S``),
and both speak of a child's failure as an image's: ``decode_timeout``, ``decode_memory``, ``decode_crashed``
rather than the parser's ``parse_*`` codes, naming the image settings rather than the document ones.
"""

from __future__ import annotations

from preprocessing.documents.sandbox import ParseBounds
from preprocessing.input_errors import InputError
from vlbatch.errors import DECODE_CRASHED, DECODE_MEMORY, DECODE_TIMEOUT, PARSE_CRASHED, PARSE_MEMORY, PARSE_TIMEOUT
from vlbatch.settings import Settings

__all__ = ["as_decode_error", "image_decode_bounds"]


def image_decode_bounds(settings: Settings, *, tasks_per_child: int) -> ParseBounds:
    """The limits of one image decoder child, from the image decode settings."""
    return ParseBounds(
        memory_bytes=settings.decoding.image_decode_memory_mb * 1024**2,
        timeout_s=settings.decoding.image_decode_timeout_s,
        tasks_per_child=tasks_per_child,
    )


def as_decode_error(exc: InputError, what: str, bounds: ParseBounds) -> InputError:
    """The sandbox speaks of parsing; an image's code and message speak of decoding and its own settings. Any other
    error (the decoder's own ``decode_error``, ``unsupported_format``...) is returned as it is."""
    if exc.code == PARSE_TIMEOUT:
        return InputError(
            DECODE_TIMEOUT,
            f"{what}: decoding took longer than {bounds.timeout_s:g} s (VLBATCH_IMAGE_DECODE_TIMEOUT_S); "
            "the decoder was stopped",
        )
    if exc.code == PARSE_MEMORY:
        cap = bounds.memory_bytes // 1024**2
        return InputError(
            DECODE_MEMORY, f"{what}: decoding needs more than the {cap} MiB cap (VLBATCH_IMAGE_DECODE_MEMORY_MB)"
        )
    if exc.code == PARSE_CRASHED:
        died = exc.message.split("the parser died of", 1)[-1].strip()
        return InputError(DECODE_CRASHED, f"{what}: the image decoder died of {died}")
    return exc

"""Thumbnails for the results browser: made once per item, cached on disk, never the full image.

A thumbnail is the item's first image, upright, at most ``SIZE`` pixels on its long side, as JPEG, under
``<data_dir>/thumbs/<job>/<item>.jpg``; the next request serves the file. Only local files inside the input roots
of the job's tenant (``vlbatch.db.tenants.roots_of``, the roots its worker reads under, checked with
``vlbatch.paths.confined``; a cached thumbnail too is served only while its source lies inside them) and data
URLs are read: the API
process does not fetch URLs for a page view (the worker's fetch policy applies to jobs, not to browsing), so a
URL item shows no thumbnail.

Clients' images are decoded as the worker decodes untrusted ones under ``VLBATCH_IMAGE_DECODE_ISOLATION=process``:
in decoder child processes (``preprocessing.documents.sandbox``) with the same address-space cap and deadline
(``VLBATCH_IMAGE_DECODE_MEMORY_MB``, ``VLBATCH_IMAGE_DECODE_TIMEOUT_S``) and the same decompression-bomb guard. The
child reads the file itself and sends back only the small JPEG, so a 64-megapixel image never enters the API
process. At most ``VLBATCH_THUMBNAIL_PROCESSES`` thumbnails are made at once; a request that finds them all busy
for ``VLBATCH_THUMBNAIL_WAIT_S`` is answered busy (the browser asks again later) rather than hold an API thread.

Every format the worker reads makes one, through the worker's own decoder (``preprocessing.thumbnails``: HEIC, AVIF,
JPEG XL, camera RAW, PSD...; a clip, its middle frame). An image no decoder reads, or whose decoder crashes, hangs
or balloons, gets no thumbnail but a ``NoThumbnail`` with the worker's code for it (``decode_error``,
``unsupported_format``, ``decode_crashed``, ``decode_timeout``, ``decode_memory``...), which the page shows as a
placeholder naming it (``placeholder_jpeg``). The code is kept beside the thumbnails (``<item>.err``) so the file is
not decoded again on every page view, except after a failure that may not happen next time (``_NOT_KEPT``).
"""

from __future__ import annotations

import functools
import io
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

from preprocessing.decode_bounds import as_decode_error, image_decode_bounds
from preprocessing.documents.sandbox import Sandbox
from preprocessing.input_errors import InputError
from preprocessing.thumbnails import thumbnail_jpeg
from vlbatch.errors import DECODE_TIMEOUT, FETCH_ERROR, NOT_FOUND, OUTSIDE_ROOTS, UNSUPPORTED_SOURCE
from vlbatch.files import write_atomically
from vlbatch.paths import PathRefused, confined, is_local, lexically_inside, local_path
from vlbatch.settings import Settings

__all__ = ["BUSY", "SIZE", "NoThumbnail", "Thumbnailer", "placeholder_jpeg"]

log = logging.getLogger(__name__)

SIZE = 256
# Failures that may not happen next time, so they are not kept: a timeout (a busy host), a file not there yet or
# unreadable for a moment.
_NOT_KEPT = frozenset({DECODE_TIMEOUT, NOT_FOUND, FETCH_ERROR})
TASKS_PER_CHILD = 10_000  # a decoder child is about a second to start: replaced after a failure, else reused


class _Busy(Enum):
    BUSY = "busy"


BUSY = _Busy.BUSY  # every decoder stayed busy for VLBATCH_THUMBNAIL_WAIT_S


@dataclass(frozen=True, slots=True)
class NoThumbnail:
    """Why an item has no thumbnail: an error code of ``vlbatch.errors``. ``readable`` is False when there was
    nothing local to read (a URL, a path outside the roots), True when a decoder tried and failed."""

    code: str
    readable: bool


def _first_image(inputs: object) -> str | None:
    images = inputs.get("images") if isinstance(inputs, dict) else None
    if not isinstance(images, list) or not images or not isinstance(images[0], str):
        return None
    return images[0]


def _readable_source(source: str, roots: Sequence[Path]) -> str | None:
    """``source`` as the child should read it: a data URL as it is, a path checked against ``roots`` and resolved;
    None for a URL or a path outside the roots (no thumbnail)."""
    if not is_local(source):
        return source if source[:5].lower() == "data:" else None
    try:
        return str(confined(source, roots, kind="file"))
    except PathRefused:
        return None


class Thumbnailer:
    """Makes and caches thumbnails in decoder children; one per API process, closed at shutdown."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._sandbox = Sandbox(
            image_decode_bounds(settings, tasks_per_child=TASKS_PER_CHILD),
            processes=settings.dashboard.thumbnail_processes,
        )
        self._slots = threading.BoundedSemaphore(settings.dashboard.thumbnail_processes)
        # A clip as the worker reads one; its own deadline inside the child's, so a slow clip says video_timeout.
        self._clip_limits = {
            "max_bytes": float(settings.limits.max_video_bytes),
            "max_seconds": settings.limits.max_video_seconds,
            "max_pixels_guard": float(settings.limits.max_video_pixels),
            "timeout_s": min(settings.decoding.video_decode_timeout_s, settings.decoding.image_decode_timeout_s * 0.9),
        }

    def close(self) -> None:
        self._sandbox.close()

    def path(self, *, job_id: str, item_id: int, roots: Sequence[Path], inputs: object) -> Path | _Busy | NoThumbnail:
        """The cached thumbnail of an item, made now if missing; ``NoThumbnail`` when it has no readable local image
        inside ``roots`` (the job's tenant's input roots, ``vlbatch.db.tenants.roots_of``) or no decoder reads it;
        ``BUSY`` when no decoder came free. A cached thumbnail or failure too is served only while its source lies
        inside the roots."""
        first = _first_image(inputs)
        if first is None or not (is_local(first) or first[:5].lower() == "data:"):
            return NoThumbnail(UNSUPPORTED_SOURCE, readable=False)  # the API fetches nothing for a page view
        if is_local(first) and not lexically_inside(local_path(first), roots):
            return NoThumbnail(OUTSIDE_ROOTS, readable=False)
        target = self.settings.uploads.data_dir / "thumbs" / job_id / f"{item_id}.jpg"
        failed = target.with_suffix(".err")
        if target.exists():
            return target
        if failed.exists():
            return NoThumbnail(failed.read_text().strip(), readable=True)
        source = _readable_source(first, roots)
        if source is None:
            return NoThumbnail(OUTSIDE_ROOTS, readable=False)
        if not self._slots.acquire(timeout=self.settings.dashboard.thumbnail_wait_s):
            return BUSY
        what = f"thumbnail of item {item_id}"
        try:
            jpeg = self._sandbox.call(
                thumbnail_jpeg,
                source,
                allowed_roots=list(roots),
                max_bytes=self.settings.limits.max_input_bytes,
                size=SIZE,
                clip_limits=self._clip_limits,
                what=what,
            )
        except InputError as exc:
            exc = as_decode_error(exc, what, self._sandbox.bounds)
            log.info("no thumbnail for item %s of job %s: %s %s", item_id, job_id, exc.code, exc)
            if exc.code not in _NOT_KEPT:  # the same bytes fail the same way again
                write_atomically(failed, exc.code.encode())
            return NoThumbnail(exc.code, readable=True)
        finally:
            self._slots.release()
        write_atomically(target, jpeg)
        return target


@functools.lru_cache(maxsize=64)
def placeholder_jpeg(code: str) -> bytes:
    """What a card shows instead of a thumbnail: a grey tile saying there is no preview and the code why (drawn
    here from our own pixels, never the client's; one per code, kept)."""
    img = Image.new("RGB", (SIZE, SIZE * 3 // 4), (226, 228, 232))
    draw = ImageDraw.Draw(img)
    for text, size, y, colour in (("no preview", 22, 0.38, (60, 64, 72)), (code, 16, 0.62, (198, 40, 40))):
        font = ImageFont.load_default(size=size)
        draw.text((img.width / 2, img.height * y), text[:32], fill=colour, font=font, anchor="mm")
    out = io.BytesIO()
    img.save(out, format="JPEG", quality=85)
    return out.getvalue()

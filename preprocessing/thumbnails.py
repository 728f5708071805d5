"""A thumbnail as JPEG bytes: what a decoder child process makes for the dashboard (``api.thumbnails``).

Module-level so a child of ``preprocessing.documents.sandbox`` can import it by name. It reads the source itself
(a path inside ``allowed_roots``, checked again here, or a data URL; never a URL), so neither the compressed bytes
nor the pixels pass through the process that asked: only the small JPEG goes back. libvips makes it when it is
installed (it shrinks while decoding, ``preprocessing.vips.thumbnail_jpeg``), else Pillow.
"""

from __future__ import annotations

import io
from pathlib import Path

from preprocessing import vips
from preprocessing.errors import InputError
from preprocessing.images import checked_size, decode_image, load_source
from vlbatch.errors import UNSUPPORTED_SOURCE

__all__ = ["thumbnail_jpeg"]


def thumbnail_jpeg(
    source: str, *, allowed_roots: list[Path], max_bytes: int, size: int, max_pixels_guard: int = 64_000_000
) -> bytes:
    """``source``'s image, upright, at most ``size`` pixels on its long side, as JPEG; ``InputError`` when it
    cannot be read or decoded (the decompression-bomb guard included)."""
    if source[:8].lower().startswith(("http://", "https://")):
        raise InputError(UNSUPPORTED_SOURCE, "a thumbnail is made of a local file or a data URL, never a URL")
    data = load_source(source, allowed_roots=allowed_roots, max_bytes=max_bytes, url_timeout_s=1.0)
    checked_size(data, max_pixels_guard=max_pixels_guard)  # the worker's format and bomb checks, header only
    fast = vips.thumbnail_jpeg(data, size=size)
    if fast is not None:
        return fast
    img = decode_image(data, max_pixels_guard=max_pixels_guard, draft_size=(2 * size, 2 * size))
    del data
    img.thumbnail((size, size))
    out = io.BytesIO()
    img.save(out, format="JPEG", quality=80)
    return out.getvalue()

"""A thumbnail as JPEG bytes: what a decoder child process makes for the dashboard (``api.thumbnails``).

Module-level so a child of ``preprocessing.documents.sandbox`` can import it by name. It reads the source itself
(a path inside ``allowed_roots``, checked again here, or a data URL; never a URL), so neither the compressed bytes
nor the pixels pass through the process that asked: only the small JPEG goes back.

Every format the worker reads makes a thumbnail, through the worker's own decoder (``decode_for_budget``: HEIC/HEIF,
AVIF, JPEG XL, camera RAW, PSD, JPEG 2000, TIFF... upright, in sRGB, with the same format and bomb checks). A JPEG,
PNG or WebP takes libvips first when it is installed (it shrinks while decoding: a 64-megapixel PNG costs tens of MB,
not the 192 MB of its RGB image); where libvips stops (a decoder it was built without, damage it refuses), the
worker's decoder has the last word, so a file the worker tagged never shows as a broken image. A clip shows its
middle frame, through the worker's video decoder (PyAV, imported only in a child that meets one).
"""

from __future__ import annotations

import io
from pathlib import Path

from preprocessing import formats, vips
from preprocessing.images import checked_format, decode_for_budget, load_source, upright_header_size
from preprocessing.input_errors import InputError
from vlbatch.errors import UNSUPPORTED_SOURCE
from vlbatch.inputs import VIDEO_SUFFIXES

__all__ = ["VIPS_FORMATS", "thumbnail_jpeg"]

# Pillow's names of the formats libvips thumbnails here (its loaders for them are in every build); every other
# format goes straight to the worker's decoder, which reads more of them (PSD, HEIC without libde265, JPEG XL, RAW)
# and reads a RAW's own preview rather than whatever image its TIFF container holds first.
VIPS_FORMATS = frozenset({"JPEG", "MPO", "PNG", "WEBP"})
_FACTOR = 28  # a clip's frame is sized on the worker's grid (patch 14, merge 2)


def thumbnail_jpeg(
    source: str,
    *,
    allowed_roots: list[Path],
    max_bytes: int,
    size: int,
    max_pixels_guard: int = 64_000_000,
    clip_limits: dict[str, float] | None = None,
) -> bytes:
    """``source``'s image, upright, at most ``size`` pixels on its long side, as JPEG; ``InputError`` with the
    worker's code (``decode_error``, ``unsupported_format``, ``image_bomb``...) when no decoder reads it. A clip
    (a video suffix or a ``data:video/`` URL, with ``clip_limits``: the fields of ``preprocessing.video.ClipLimits``,
    plain so the asking process never imports PyAV) shows its middle frame, chosen and decoded by the worker's
    video decoder within those limits."""
    if source[:8].lower().startswith(("http://", "https://")):
        raise InputError(UNSUPPORTED_SOURCE, "a thumbnail is made of a local file or a data URL, never a URL")
    clip = source[:11].lower() == "data:video/" or Path(source.split("?", 1)[0]).suffix.lower() in VIDEO_SUFFIXES
    if clip_limits is not None and clip:
        return _clip_frame(source, allowed_roots=allowed_roots, limits=clip_limits, size=size)
    data = load_source(source, allowed_roots=allowed_roots, max_bytes=max_bytes, url_timeout_s=1.0)
    if formats.sniff(data) is None and checked_format(data, max_pixels_guard=max_pixels_guard) in VIPS_FORMATS:
        try:
            fast = vips.thumbnail_jpeg(data, size=size)
        except InputError:
            fast = None  # libvips stopped at damage; Pillow's decoder has the last word, as in the worker
        if fast is not None:
            return fast
    # The worker's decode (upright, sRGB, RGB) to the area whose long side is ``size``: a RAW's embedded preview
    # covers that, so it takes no demosaic; a JPEG decodes at a DCT scale.
    width, height = upright_header_size(data, max_pixels_guard=max_pixels_guard)
    scale = min(1.0, size / max(width, height))
    # Half a pixel more on the long side, so float rounding in ``smart_resize`` never leaves it a pixel short (nor
    # a pixel over, which would no longer fit a RAW's preview made at exactly this size).
    area = max(1, int(width * height * scale * scale * (1 + 1 / size)))
    img = decode_for_budget(data, factor=1, min_pixels=1, max_pixels=area, max_pixels_guard=max_pixels_guard)
    del data
    img.thumbnail((size, size))
    out = io.BytesIO()
    img.save(out, format="JPEG", quality=80)
    return out.getvalue()


def _clip_frame(source: str, *, allowed_roots: list[Path], limits: dict[str, float], size: int) -> bytes:
    from preprocessing.video import ClipLimits, FrameSelection, decode_frames  # PyAV only where a clip is read

    side = max(_FACTOR, size // _FACTOR * _FACTOR)  # one frame of at most side x side, as the worker sizes frames
    clip = decode_frames(
        source,
        allowed_roots=allowed_roots,
        limits=ClipLimits(
            max_bytes=int(limits["max_bytes"]),
            max_seconds=limits["max_seconds"],
            max_pixels_guard=int(limits["max_pixels_guard"]),
            timeout_s=limits["timeout_s"],
        ),
        selection=FrameSelection.EVEN,
        max_frames=1,
        fps=1.0,
        scene_threshold=1.0,
        max_visual_tokens=(side // _FACTOR) ** 2,
        factor=_FACTOR,
        patch_size=_FACTOR // 2,
        merge_size=2,
        min_pixels=_FACTOR * _FACTOR,
        max_pixels=side * side,
    )
    img = clip.frames[0].image
    img.thumbnail((size, size))
    out = io.BytesIO()
    img.save(out, format="JPEG", quality=80)
    return out.getvalue()

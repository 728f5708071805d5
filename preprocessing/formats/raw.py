"""Camera RAW files through LibRaw (rawpy, imported on first use).

LibRaw reads the header first (``open_buffer``): the sensor size for the bomb guard, the visible size and the
camera's rotation (LibRaw's ``flip``), before any raw sample is unpacked. The pixels then come the cheapest
way that still covers the target grid: the JPEG preview the camera embeds (a 1-2 MP preview covers 256-1024
tokens with no demosaic at all), decoded at the smallest DCT scale covering the target; else a half-size
demosaic (each 2x2 Bayer block becomes one pixel, a quarter of the work of a full one), or a full one when
even half the sensor is smaller than the target. Both come out as 8-bit sRGB with the camera's white balance.

The EXIF of TIFF-based RAWs (DNG, CR2, NEF, ARW, ...) is read by Pillow from the file's first IFD; for the
others LibRaw's own capture time is kept.
"""

from __future__ import annotations

import io
import struct
from typing import Any

from PIL import Image

from preprocessing.formats import Special
from preprocessing.input_errors import InputError

__all__ = ["open_raw"]

# LibRaw's flip -> EXIF orientation; its postprocess applies the same rotation.
_FLIP_TO_ORIENTATION = {0: 1, 3: 3, 5: 8, 6: 6}
_UPRIGHT = {
    3: Image.Transpose.ROTATE_180,
    6: Image.Transpose.ROTATE_270,
    8: Image.Transpose.ROTATE_90,
}
# A preview whose aspect ratio is this far from the visible sensor area's is not the same picture (a cropped
# or letterboxed preview): the demosaic is used instead.
_ASPECT_TOLERANCE = 0.02
_WHAT_TO_DO = "export the photo as JPEG or DNG from the camera's software"


def open_raw(data: bytes, max_pixels_guard: int) -> Special:
    """The RAW file's upright size, orientation and EXIF, and a loader of its upright RGB pixels."""
    import rawpy

    raw = rawpy.RawPy()
    try:
        raw.open_buffer(io.BytesIO(data))
    except rawpy.LibRawFileUnsupportedError:
        raw.close()
        raise InputError("unsupported_format", f"this RAW file is not one LibRaw reads; {_WHAT_TO_DO}") from None
    except rawpy.LibRawError as exc:
        raw.close()
        raise InputError("decode_error", f"RAW file: {type(exc).__name__}: {exc}") from None
    sizes = raw.sizes
    sensor = sizes.raw_width * sizes.raw_height
    if sensor > max_pixels_guard or sizes.width * sizes.height > max_pixels_guard:
        raw.close()
        raise InputError("image_bomb", f"RAW sensor {sizes.raw_width}x{sizes.raw_height} exceeds {max_pixels_guard}")
    if sizes.width <= 0 or sizes.height <= 0:
        raw.close()
        raise InputError("decode_error", f"RAW image has no pixels ({sizes.width}x{sizes.height})")
    orientation = _FLIP_TO_ORIENTATION.get(sizes.flip, 1)
    stored = (sizes.width, sizes.height)
    upright = (stored[1], stored[0]) if orientation in (6, 8) else stored

    def load(target: tuple[int, int]) -> Image.Image:
        try:
            stored_target = (target[1], target[0]) if orientation in (6, 8) else target
            img = _preview(raw, stored, stored_target, max_pixels_guard)
            if img is None:
                return _demosaic(raw, upright, target)
            return img.transpose(_UPRIGHT[orientation]) if orientation in _UPRIGHT else img
        except rawpy.LibRawError as exc:
            raise InputError("decode_error", f"RAW file: {type(exc).__name__}: {exc}") from None
        finally:
            raw.close()

    exif = _tiff_exif(data)
    # LibRaw's own time costs tens of milliseconds: asked only of files whose EXIF has none.
    dated = exif.get(0x0132) or exif.get_ifd(0x8769).get(0x9003)
    return Special(upright, load, exif, orientation, None if dated else _timestamp(raw))


def _preview(raw: Any, stored: tuple[int, int], target: tuple[int, int], guard: int) -> Image.Image | None:
    """The embedded JPEG preview, decoded at the smallest DCT scale still covering ``target`` (stored
    orientation), when it shows the whole frame at least that large; None otherwise."""
    import rawpy

    try:
        thumb = raw.extract_thumb()
    except (rawpy.LibRawNoThumbnailError, rawpy.LibRawUnsupportedThumbnailError):
        return None
    if thumb.format != rawpy.ThumbFormat.JPEG:
        return None
    try:
        img = Image.open(io.BytesIO(thumb.data), formats=("JPEG",))
    except (OSError, SyntaxError, ValueError):
        return None  # a damaged preview: the raw samples may still be fine
    width, height = img.size
    if width * height > guard or width < target[0] or height < target[1]:
        return None
    if abs(width / height - stored[0] / stored[1]) > _ASPECT_TOLERANCE * stored[0] / stored[1]:
        return None
    # The plain-JPEG fast path: libjpeg-turbo's DCT-scaled decode and libvips' resize straight to the target.
    from preprocessing import vips

    # The largest DCT reduction still covering the target, as ``images.dct_scale_for`` picks it.
    scale = next(s for s in (8, 4, 2, 1) if s * target[0] <= width and s * target[1] <= height)
    try:
        fast = vips.decode_jpeg_resized(thumb.data, shrink=scale, size=target)
    except InputError:
        fast = None
    if fast is not None:
        return fast
    img.draft("RGB", target)
    try:
        img.load()
    except (OSError, SyntaxError, ValueError):
        return None
    return img


def _demosaic(raw: Any, upright: tuple[int, int], target: tuple[int, int]) -> Image.Image:
    """Half-size demosaic when half the visible area still covers ``target`` (upright), else a full one."""
    half = upright[0] // 2 >= target[0] and upright[1] // 2 >= target[1]
    rgb = raw.postprocess(half_size=half, use_camera_wb=True, output_bps=8)  # flip applied, sRGB
    return Image.fromarray(rgb)


def _timestamp(raw: Any) -> str | None:
    """LibRaw's capture time (local camera time, no offset), ISO 8601; None when the file has none."""
    try:
        stamp = raw.other.timestamp
    except (AttributeError, ValueError, OSError):
        return None
    if stamp is None or stamp.timestamp() <= 0:
        return None
    return str(stamp.replace(tzinfo=None).isoformat(timespec="seconds"))


def _tiff_exif(data: bytes) -> Image.Exif:
    """EXIF from the first IFD of a TIFF-based RAW (the camera's make, model, time and lens live there)."""
    exif = Image.Exif()
    if data[:4] in (b"II*\x00", b"MM\x00*"):
        try:
            exif.load(data)
        except (SyntaxError, ValueError, struct.error, EOFError, KeyError):
            return Image.Exif()
    return exif

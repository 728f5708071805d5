"""JPEG decode at a DCT scale through libjpeg-turbo's own API (``simplejpeg``), for libvips to resize.

Why: at the same scale, libjpeg-turbo's decode called directly costs fewer instructions than libvips'
``jpegload`` (and slightly fewer than Pillow's), and the C-contiguous array it returns is read by libvips
without a copy. Counted with ``valgrind --tool=callgrind`` on the 12 MP photo of
``benchmarks/preprocess_images.py`` at 1/2 scale: 372 M instructions per decode against 393 M for Pillow's
``draft`` decode; decode plus libvips' resize to the 1008x756 grid 467 M, against 551 M when libvips decodes.

libjpeg-turbo also scales in eighths, but the scale stays a power of two (as Pillow's ``draft`` and libvips'
shrink-on-load pick it): 3/8 takes more instructions than 1/2 (its 3x3 inverse DCT has no SIMD path) and
loses detail on text (PSNR of rendered text against a full-resolution resize: 33.6 dB against 40.0 dB).

``simplejpeg`` is imported on first use; without it the caller keeps libvips' or Pillow's decode.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from preprocessing.input_errors import InputError
from preprocessing.optional import OptionalModule

__all__ = ["available", "decode_scaled", "tolerable"]

_SIMPLEJPEG = OptionalModule("simplejpeg")
# JPEG colour spaces decoded here, and the output space asked for; CMYK and YCCK go to Pillow.
_OUTPUT = {"Gray": "GRAY", "YCbCr": "RGB", "RGB": "RGB"}


def _simplejpeg() -> ModuleType | None:
    return _SIMPLEJPEG.get()


def available() -> bool:
    """True when simplejpeg (and its bundled libjpeg-turbo) loads."""
    return _simplejpeg() is not None


def decode_scaled(data: bytes, *, shrink: int) -> Any | None:
    """``data`` decoded at DCT scale 1/``shrink`` (1, 2, 4 or 8), ceil(size / shrink) pixels, as an
    (h, w, bands) uint8 array with 1 (gray) or 3 (RGB) bands, in the stored orientation; None when
    simplejpeg is missing, the colour space is not gray/YCbCr/RGB or simplejpeg stops at a mere warning (the
    caller then decodes another way).

    A file libjpeg-turbo only warns about (bytes before a marker, a damaged EXIF block) is decoded; a
    truncated or corrupt one raises ``InputError("decode_error")``, as the other decode paths do.
    """
    sj = _simplejpeg()
    if sj is None:
        return None
    try:
        try:
            height, width, space, _ = sj.decode_jpeg_header(data)
        except ValueError as exc:
            if not tolerable(str(exc)):
                raise
            return None
        output = _OUTPUT.get(space)
        if output is None:
            return None
        # simplejpeg picks the smallest eighth-scale whose output is at least this: exactly 1/shrink.
        want_w, want_h = -(-width // shrink), -(-height // shrink)
        try:
            return sj.decode_jpeg(data, colorspace=output, min_width=want_w, min_height=want_h, strict=True)
        except ValueError as exc:
            if not tolerable(str(exc)):
                raise
            # A warning only (stray bytes before a marker, a damaged APPn block): every viewer shows these.
            try:
                return sj.decode_jpeg(data, colorspace=output, min_width=want_w, min_height=want_h, strict=False)
            except ValueError:
                return None  # simplejpeg stops at some warnings even when not strict: libvips or Pillow decodes
    except ValueError as exc:  # simplejpeg's error for corrupt, truncated or unsupported data
        raise InputError("decode_error", f"JPEG decode failed: {' '.join(str(exc).split())}") from exc


# libjpeg-turbo's warnings that mean pixels are missing: the file ends (or its entropy-coded data does) early.
# The decoder would fill the rest with grey; such a file stays a decode_error, as in Pillow's path.
_MISSING_PIXELS = ("premature end", "bad huffman code", "corrupt jpeg data: found marker")


def tolerable(message: str) -> bool:
    """True for libjpeg-turbo's complaint about a JPEG whose pixels are all there (what strict decoding
    refuses and a viewer shows); False for one whose pixels are not."""
    text = message.lower()
    return not any(words in text for words in _MISSING_PIXELS)

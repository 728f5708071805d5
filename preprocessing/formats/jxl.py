"""JPEG XL through libjxl (imagecodecs, imported on first use).

The size and orientation are read here from the codestream's first bits (``SizeHeader`` and the start of
``ImageMetadata``, ISO/IEC 18181-1), inside the ISO-BMFF container when there is one, so the bomb guard
runs before libjxl allocates anything. libjxl applies the orientation while decoding. EXIF comes from the
container's ``Exif`` box. 16-bit and float images are scaled to 8 bits by the caller.

What the guard sees is what libjxl decodes: the codestream joined from every ``jxlp``/``jxlc`` box in file
order (a ``jxlc`` of 64x64 after a ``jxlp`` of 10000x10000 is the larger image), and of an animation only the
first frame, which libjxl composes at the image's size. Every other frame is skipped, so an animation of 64
frames costs what its first frame costs. libjxl's own failures (``JpegxlError``) are ``decode_error`` with its
message.
"""

from __future__ import annotations

import struct

from PIL import Image

from preprocessing.formats import Special
from preprocessing.input_errors import InputError

__all__ = ["open_jxl"]

_CONTAINER = b"\x00\x00\x00\x0cJXL \x0d\x0a\x87\x0a"
# SizeHeader's aspect ratios (numerator, denominator) for ratio codes 1-7; 0 means the width is coded.
# More boxes than any writer makes (a still has a handful; a streamed codestream some jxlp parts per frame).
MAX_BOXES = 4096
_RATIOS = {1: (1, 1), 2: (12, 10), 3: (4, 3), 4: (3, 2), 5: (16, 9), 6: (5, 4), 7: (2, 1)}


class _Bits:
    """JPEG XL's bit reader: least significant bit of each byte first."""

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def u(self, n: int) -> int:
        value = 0
        for k in range(n):
            byte = self.data[(self.pos + k) >> 3]  # IndexError: the header is cut short
            value |= ((byte >> ((self.pos + k) & 7)) & 1) << k
        self.pos += n
        return value

    def u32(self) -> int:
        """The size fields' U32: 9, 13, 18 or 30 bits, plus one."""
        return self.u((9, 13, 18, 30)[self.u(2)]) + 1


def _boxes(data: bytes) -> tuple[bytes, bytes]:
    """The codestream libjxl decodes and the ``Exif`` box's body, from the container's boxes.

    libjxl reads the codestream from every ``jxlp`` part and the ``jxlc`` box in file order, joined, up to the
    part flagged last (or the ``jxlc``): so the size is read here from what it will decode, not from the first
    ``jxlc``. A box past that point, a box running past the file's end or more than ``MAX_BOXES`` boxes are
    refused before any pixel is decoded.
    """
    parts: list[bytes] = []
    exif = b""
    closed = False  # the codestream's last part (a jxlc, or a jxlp flagged last) has been read
    pos, count = 0, 0
    while pos + 8 <= len(data):
        count += 1
        if count > MAX_BOXES:
            raise InputError("decode_error", f"JPEG XL container with more than {MAX_BOXES} boxes")
        size, kind = struct.unpack_from(">I4s", data, pos)
        head = 8
        if size == 1:
            if pos + 16 > len(data):
                raise InputError("decode_error", "JPEG XL: a box header is cut short")
            (size,) = struct.unpack_from(">Q", data, pos + 8)
            head = 16
        end = len(data) if size == 0 else pos + size
        if end < pos + head or end > len(data):
            raise InputError("decode_error", f"JPEG XL: the {kind!r} box at byte {pos} runs past the file's end")
        body = data[pos + head : end]
        if kind in (b"jxlc", b"jxlp"):
            if closed:
                raise InputError("decode_error", "JPEG XL: a codestream box after the codestream's last part")
            if kind == b"jxlp":
                if len(body) < 4:
                    raise InputError("decode_error", "JPEG XL: a jxlp box without its part index")
                (index,) = struct.unpack_from(">I", body)
                closed = bool(index & 0x80000000)
                body = body[4:]  # a 4-byte part index precedes each part
            else:
                closed = True
            parts.append(body)
        elif kind == b"Exif" and not exif:
            exif = body
        pos = end
    return b"".join(parts), exif


def header(codestream: bytes) -> tuple[tuple[int, int], int]:
    """(width, height) as stored and the orientation (1-8) from a codestream's first bytes."""
    if not codestream.startswith(b"\xff\x0a"):
        raise InputError("decode_error", "JPEG XL: no codestream signature")
    bits = _Bits(codestream[2:64])
    try:
        small = bits.u(1)
        height = (bits.u(5) + 1) * 8 if small else bits.u32()
        ratio = bits.u(3)
        if ratio:
            num, den = _RATIOS[ratio]
            width = height * num // den
        else:
            width = (bits.u(5) + 1) * 8 if small else bits.u32()
        orientation = 1
        all_default = bits.u(1)
        if not all_default and bits.u(1):  # ImageMetadata.extra_fields
            orientation = bits.u(3) + 1
    except IndexError:
        raise InputError("decode_error", "JPEG XL: the header is cut short") from None
    return (width, height), orientation


def open_jxl(data: bytes) -> Special:
    """The file's upright size and orientation, its EXIF, and a loader of its upright pixels."""
    codestream, exif_box = _boxes(data) if data.startswith(_CONTAINER) else (data, b"")
    (width, height), orientation = header(codestream)
    exif = Image.Exif()
    if raw_exif := exif_box[4:]:  # after the 4-byte offset of the TIFF header
        try:
            exif.load(raw_exif)
        except (SyntaxError, ValueError, struct.error, EOFError):
            exif = Image.Exif()
    upright = (height, width) if orientation in (5, 6, 7, 8) else (width, height)

    def load(_target: tuple[int, int]) -> Image.Image:
        import imagecodecs

        try:
            # The first frame only: an animation's later frames are never decoded (asking for every frame has
            # libjxl decode them all into one array, each as large as the image the guard allowed once).
            pixels = imagecodecs.jpegxl_decode(data, 0, numthreads=1)
        except (RuntimeError, ValueError) as exc:  # JpegxlError is a RuntimeError; a bad signature a ValueError
            raise InputError("decode_error", f"JPEG XL decode failed: {exc}") from exc
        return from_array(pixels)

    return Special(upright, load, exif, orientation)


def from_array(pixels: object) -> Image.Image:
    """A decoder's (h, w[, bands]) array of 8-bit, 16-bit or float samples as an 8-bit Pillow image."""
    import numpy as np

    array = np.asarray(pixels)
    if array.dtype == np.uint16:
        array = (array >> 8).astype(np.uint8)
    elif array.dtype.kind == "f":
        array = (np.clip(array, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)
    elif array.dtype != np.uint8:
        raise InputError("unsupported_format", f"JPEG XL samples of type {array.dtype} are not decoded")
    if array.ndim == 3 and array.shape[2] == 1:
        array = array[:, :, 0]
    if not (array.ndim == 2 or (array.ndim == 3 and array.shape[2] in (2, 3, 4))):
        raise InputError("unsupported_format", f"JPEG XL with {array.shape} samples is not decoded")
    return Image.fromarray(np.ascontiguousarray(array))  # L, LA, RGB or RGBA from the array's shape

"""A minimal valid DNG written from scratch (no library writes camera RAW files), for the tests, the
preprocessing benchmark and the demo album.

TIFF/EP layout as cameras and Adobe's converter write it: IFD0 is a JPEG preview (NewSubfileType 1) with the
DNG tags, the camera's make, model and orientation and an EXIF IFD (capture time with offset, lens, GPS);
its one SubIFD is the raw CFA image (16-bit RGGB Bayer samples, uncompressed).
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass

import numpy as np
from PIL import Image

BYTE, ASCII, SHORT, LONG, RATIONAL, SRATIONAL = 1, 2, 3, 4, 5, 10
_SIZES = {BYTE: 1, ASCII: 1, SHORT: 2, LONG: 4, RATIONAL: 8, SRATIONAL: 8}
_FORMATS = {BYTE: "B", ASCII: "B", SHORT: "H", LONG: "I", RATIONAL: "I", SRATIONAL: "i"}


@dataclass
class _Tag:
    tag: int
    kind: int
    values: list[int] | bytes


def _ascii(text: str) -> bytes:
    return text.encode() + b"\0"


class _Writer:
    """Little-endian TIFF assembly: IFDs and blobs laid out in one pass, offsets patched in place."""

    def __init__(self) -> None:
        self.out = bytearray(b"II*\x00\x00\x00\x00\x00")

    def blob(self, data: bytes) -> int:
        if len(self.out) % 2:
            self.out += b"\0"
        offset = len(self.out)
        self.out += data
        return offset

    def ifd(self, tags: list[_Tag]) -> int:
        payloads: list[bytes] = []
        for t in tags:
            if isinstance(t.values, bytes):
                payloads.append(t.values)
            else:
                payloads.append(struct.pack(f"<{len(t.values)}{_FORMATS[t.kind]}", *t.values))
        # Out-of-line values first, then the directory pointing at them.
        offsets = [self.blob(p) if len(p) > 4 else -1 for p in payloads]
        if len(self.out) % 2:
            self.out += b"\0"
        start = len(self.out)
        self.out += struct.pack("<H", len(tags))
        for t, p, off in sorted(zip(tags, payloads, offsets, strict=True), key=lambda x: x[0].tag):
            count = len(p) // _SIZES[t.kind]
            field = p.ljust(4, b"\0") if off < 0 else struct.pack("<I", off)
            self.out += struct.pack("<HHI", t.tag, t.kind, count) + field
        self.out += b"\0\0\0\0"
        return start


def bayer(rgb: Image.Image, white: int = 4095) -> np.ndarray:
    """RGGB mosaic of ``rgb`` (linear enough for a test), 16-bit samples up to ``white``."""
    a = np.asarray(rgb.convert("RGB"), dtype=np.uint32) * white // 255
    h, w = a.shape[:2]
    out = np.zeros((h, w), dtype=np.uint16)
    out[0::2, 0::2] = a[0::2, 0::2, 0]
    out[0::2, 1::2] = a[0::2, 1::2, 1]
    out[1::2, 0::2] = a[1::2, 0::2, 1]
    out[1::2, 1::2] = a[1::2, 1::2, 2]
    return out


def dng_bytes(
    picture: Image.Image,
    *,
    preview_size: tuple[int, int] | None = (256, 192),
    orientation: int = 1,
    make: str = "Testmaker",
    model: str = "Test Camera 1",
    taken: str = "2024:05:01 12:34:56",
    offset: str = "+02:00",
    lens: str = "Test Lens 24-70mm",
    gps: tuple[float, float] | None = (48.8584, 2.2945),
) -> bytes:
    """A DNG of ``picture`` (its size is the sensor's; even on both axes) with a JPEG preview of
    ``preview_size`` (None: no preview), tagged with these EXIF values."""
    w, h = picture.size
    writer = _Writer()
    raw_offset = writer.blob(bayer(picture).tobytes())
    raw_ifd = writer.ifd(
        [
            _Tag(254, LONG, [0]),
            _Tag(256, LONG, [w]),
            _Tag(257, LONG, [h]),
            _Tag(258, SHORT, [16]),
            _Tag(259, SHORT, [1]),
            _Tag(262, SHORT, [32803]),
            _Tag(273, LONG, [raw_offset]),
            _Tag(277, SHORT, [1]),
            _Tag(278, LONG, [h]),
            _Tag(279, LONG, [w * h * 2]),
            _Tag(284, SHORT, [1]),
            _Tag(33421, SHORT, [2, 2]),
            _Tag(33422, BYTE, bytes([0, 1, 1, 2])),
            _Tag(50714, LONG, [0]),  # BlackLevel
            _Tag(50717, LONG, [4095]),  # WhiteLevel
        ]
    )
    exif_tags = [
        _Tag(36867, ASCII, _ascii(taken)),  # DateTimeOriginal
        _Tag(36881, ASCII, _ascii(offset)),  # OffsetTimeOriginal
        _Tag(42036, ASCII, _ascii(lens)),  # LensModel
    ]
    exif_ifd = writer.ifd(exif_tags)
    ifd0 = [
        _Tag(254, LONG, [1]),
        _Tag(271, ASCII, _ascii(make)),
        _Tag(272, ASCII, _ascii(model)),
        _Tag(274, SHORT, [orientation]),
        _Tag(330, LONG, [raw_ifd]),
        _Tag(34665, LONG, [exif_ifd]),
        _Tag(50706, BYTE, bytes([1, 4, 0, 0])),  # DNGVersion
        _Tag(50707, BYTE, bytes([1, 1, 0, 0])),  # DNGBackwardVersion
        _Tag(50708, ASCII, _ascii(f"{make} {model}")),  # UniqueCameraModel
        # ColorMatrix1 (XYZ -> camera) of an sRGB-like camera, and D65 as its illuminant.
        _Tag(
            50721, SRATIONAL, _rationals([3.2406, -1.5372, -0.4986, -0.9689, 1.8758, 0.0415, 0.0557, -0.2040, 1.0570])
        ),
        _Tag(50778, SHORT, [21]),
        _Tag(50728, RATIONAL, _rationals([1.0, 1.0, 1.0], signed=False)),  # AsShotNeutral
    ]
    if gps is not None:
        ifd0.append(_Tag(34853, LONG, [writer.ifd(_gps_tags(*gps))]))
    if preview_size is not None:
        buf = io.BytesIO()
        picture.convert("RGB").resize(preview_size).save(buf, "JPEG", quality=85)
        jpeg_offset = writer.blob(buf.getvalue())
        ifd0 += [
            _Tag(256, LONG, [preview_size[0]]),
            _Tag(257, LONG, [preview_size[1]]),
            _Tag(258, SHORT, [8, 8, 8]),
            _Tag(259, SHORT, [7]),
            _Tag(262, SHORT, [6]),
            _Tag(273, LONG, [jpeg_offset]),
            _Tag(277, SHORT, [3]),
            _Tag(278, LONG, [preview_size[1]]),
            _Tag(279, LONG, [len(buf.getvalue())]),
        ]
    first = writer.ifd(ifd0)
    writer.out[4:8] = struct.pack("<I", first)
    return bytes(writer.out)


def _rationals(values: list[float], *, signed: bool = True) -> list[int]:
    out: list[int] = []
    for v in values:
        out += [round(v * 10000), 10000]
    return out if signed else [abs(x) for x in out]


def _gps_tags(lat: float, lon: float) -> list[_Tag]:
    def dms(v: float) -> list[int]:
        v = abs(v)
        d, m = int(v), int(abs(v) % 1 * 60)
        s = (v * 3600 - d * 3600 - m * 60) * 1000
        return [d, 1, m, 1, round(s), 1000]

    return [
        _Tag(0, BYTE, bytes([2, 3, 0, 0])),
        _Tag(1, ASCII, b"N\0" if lat >= 0 else b"S\0"),
        _Tag(2, RATIONAL, dms(lat)),
        _Tag(3, ASCII, b"E\0" if lon >= 0 else b"W\0"),
        _Tag(4, RATIONAL, dms(lon)),
    ]

"""Photo formats Pillow does not read by itself: one small module per vendor library, each imported on first
use so a worker that never meets the format never loads its codec.

- ``heif``: HEIC/HEIF (iPhones, Samsung) through libheif (pillow-heif), as a Pillow plugin: such a file
  takes Pillow's path, with its own rotation and mirror already applied.
- ``jxl``: JPEG XL through libjxl (imagecodecs); its size and orientation are read from the codestream
  header before a pixel is decoded.
- ``raw``: camera RAW files (DNG, CR2, CR3, NEF, ARW, RAF, ORF, RW2, ...) through LibRaw (rawpy): the
  embedded JPEG preview when it covers the target, else a half-size demosaic.

``sniff`` names the module a file belongs to from its first bytes; every other file is Pillow's.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field

from PIL import Image

__all__ = ["Special", "sniff"]

# ISO-BMFF brands of HEIF/HEIC stills (libheif reads them); AVIF is Pillow's own.
HEIF_BRANDS = (b"heic", b"heix", b"heim", b"heis", b"hevc", b"hevx", b"mif1", b"msf1")
_JXL_CODESTREAM = b"\xff\x0a"
_JXL_CONTAINER = b"\x00\x00\x00\x0cJXL \x0d\x0a\x87\x0a"
# TIFF-like RAW headers that are not TIFF's own (Olympus ORF, Panasonic RW2) and Fujifilm's RAF.
_RAW_MAGIC = (b"IIRO", b"IIRS", b"MMOR", b"IIU\x00", b"FUJIFILMCCD-RAW")
_TIFF_MAGIC = (b"II*\x00", b"MM\x00*")
_DNG_VERSION, _SUBFILE_TYPE, _SUB_IFDS = 50706, 254, 330


@dataclass
class Special:
    """A file one of these modules decodes: its upright size (read from the header, before any pixel) and a
    loader that returns the upright pixels, at least ``target`` on both axes where the format can decode
    smaller for free (RAW previews, half-size demosaic), in any mode ``images`` turns into 8-bit sRGB."""

    size: tuple[int, int]
    load: Callable[[tuple[int, int]], Image.Image]
    exif: Image.Exif = field(default_factory=Image.Exif)
    orientation: int = 1  # what the header says; the loader has applied it already
    taken_at: str | None = None  # from the decoder's own metadata when the file has no EXIF block


def sniff(data: bytes) -> str | None:
    """ "heif", "jxl" or "raw" for a file of those modules, None for Pillow's (or for no image at all)."""
    if data[4:8] == b"ftyp":
        brand = data[8:12]
        if brand in HEIF_BRANDS:
            return "heif"
        if brand == b"crx ":  # Canon CR3
            return "raw"
        return None
    if data.startswith((_JXL_CODESTREAM, _JXL_CONTAINER)):
        return "jxl"
    if data.startswith(_RAW_MAGIC):
        return "raw"
    if data.startswith(_TIFF_MAGIC) and _tiff_is_raw(data):
        return "raw"
    return None


def _tiff_is_raw(data: bytes) -> bool:
    """A TIFF container holding a camera's raw data: Canon's CR2 mark, a DNG version tag, or a first image
    that is only a reduced one with the real images in sub-IFDs (NEF, ARW, PEF, SRW, ...)."""
    if data[8:10] == b"CR":
        return True
    order = "<" if data[:2] == b"II" else ">"
    try:
        (offset,) = struct.unpack_from(order + "I", data, 4)
        (count,) = struct.unpack_from(order + "H", data, offset)
        tags: dict[int, int] = {}
        for k in range(min(count, 512)):
            tag, _type, _n, value = struct.unpack_from(order + "HHII", data, offset + 2 + 12 * k)
            tags[tag] = value if _type == 4 else value & 0xFFFF if order == "<" else value >> 16
    except struct.error:
        return False
    return _DNG_VERSION in tags or (tags.get(_SUBFILE_TYPE) == 1 and _SUB_IFDS in tags)

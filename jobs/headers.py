"""An image's size from its header, for dry runs: the API opens only what the worker would read, reads only a
file's head, and decodes no pixels.

- A local path is read as the worker reads it (``preprocessing.paths``): checked inside the tenant's roots as
  written, then resolved and checked again; only a regular file is opened (a FIFO, a device or a socket is
  refused from its ``stat``, and the open adds ``O_NONBLOCK``, so nothing can block the read), and at most
  ``max_bytes`` of its head are read. A data URL has only the base64 of its head decoded. URLs and ``s3://``
  objects are not fetched: their size is unknown until a worker reads them.
- The head goes to Pillow's lazy ``Image.open``, restricted to the formats the worker decodes
  (``preprocessing.images.DECODED_FORMATS``), which parses the header and stops before the pixels; nothing here
  calls ``load`` or ``getexif`` (a PNG's ``getexif`` decodes the whole image to reach an eXIf chunk after its
  IDAT). The EXIF orientation is not read at all: turning an image a quarter swaps its sides, and the visual
  tokens of a resize do not depend on which side is which (``smart_resize`` treats both sides alike).

A first read takes ``FIRST_READ`` bytes; a header longer than that (a JPEG whose metadata precede its size) is
read again with twice as many, up to ``max_bytes``.

``header_facts`` gives a photo's facts (``preprocessing.photo_facts``) for a dry run's prompt context, from the
EXIF block of the formats that hold it in their header (``EXIF_IN_HEADER``: a JPEG's APP1 segment, a TIFF's first
directory), which Pillow parses when it opens them; other formats tell no facts here.
"""

from __future__ import annotations

import base64
import binascii
import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from PIL import Image

from preprocessing.images import DECODED_FORMATS
from preprocessing.input_errors import InputError
from preprocessing.paths import confined_path, open_regular_file, read_up_to
from preprocessing.photo_facts import photo_facts
from vlbatch.paths import is_local, local_path

FIRST_READ = 64 * 1024
EXIF_IN_HEADER = ("JPEG", "MPO", "TIFF")


def header_size(source: str, *, roots: Sequence[Path], max_bytes: int) -> tuple[int, int] | None:
    """(width, height) of the image ``source`` from its header, or None when it cannot be known without more:
    a URL or an object, a file outside ``roots``, missing or not regular, a header longer than ``max_bytes``, a
    format the worker does not decode here (HEIC, JPEG XL, RAW: their size shows once they run)."""
    want = min(FIRST_READ, max_bytes)
    while True:
        head = read_head(source, roots=roots, max_bytes=want)
        if head is None:
            return None
        size = _size_of(head)
        if size is not None or len(head) < want or want >= max_bytes:
            return size
        want = min(2 * want, max_bytes)


def read_head(source: str, *, roots: Sequence[Path], max_bytes: int) -> bytes | None:
    """At most ``max_bytes`` from the start of ``source`` (a local path inside ``roots`` or a data URL); None for
    anything else, or a file that may not or cannot be read."""
    lowered = source[:16].lower()
    if lowered.startswith("data:"):
        return _data_url_head(source, max_bytes)
    if not is_local(source):
        return None
    try:
        path = confined_path(local_path(source), roots)
        with open_regular_file(path, roots=roots) as (fd, _):
            return read_up_to(fd, max_bytes)
    except (InputError, OSError):
        return None


def _data_url_head(source: str, max_bytes: int) -> bytes | None:
    header, sep, payload = source[: 64 + (max_bytes * 4) // 3 + 4].partition(",")
    if not sep or not header.lower().startswith("data:image/") or not header.lower().endswith(";base64"):
        return None
    quads = payload[: -(-max_bytes // 3) * 4]
    try:
        return base64.b64decode(quads[: len(quads) // 4 * 4], validate=True)
    except (binascii.Error, ValueError):
        return None


def _size_of(head: bytes) -> tuple[int, int] | None:
    try:
        with Image.open(io.BytesIO(head), formats=DECODED_FORMATS) as img:
            width, height = img.size
    except Exception:  # not an image Pillow reads here, or its header goes on past the head
        return None
    return (width, height) if width > 0 and height > 0 else None


def header_facts(source: str, *, roots: Sequence[Path], max_bytes: int) -> dict[str, Any]:
    """The photo's facts from the EXIF in its header (``EXIF_IN_HEADER`` formats), GPS included; {} when none can
    be known without decoding (another format, a header past ``max_bytes``, a source not read here)."""
    head = read_head(source, roots=roots, max_bytes=max_bytes)
    if head is None:
        return {}
    try:
        with Image.open(io.BytesIO(head), formats=DECODED_FORMATS) as img:
            if img.format not in EXIF_IN_HEADER:
                return {}
            return photo_facts(img.getexif(), size=img.size, orientation=1)
    except Exception:  # not an image Pillow reads here, or a damaged header: no facts, as the worker would find
        return {}

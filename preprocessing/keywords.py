"""A photo's existing human keywords, read where photo managers keep them, without exiftool.

Sources, first that holds a human keyword wins: the XMP sidecar (``photo.jpg.xmp``, darktable's and digiKam's
naming, then ``photo.xmp``, Lightroom's), then the XMP embedded in the file, then its IPTC Keywords (IIM 2:25 in a
JPEG's Photoshop APP13 segment). In an XMP packet the fields are ``dc:subject`` (flat), ``lr:hierarchicalSubject``
(levels split by ``|``) and ``digiKam:TagsList`` (levels split by ``/``). A hierarchy gives its leaf (``Places|
Europe|Paris`` is ``Paris``; a flat keyword that only names an inner level, as Lightroom adds the parents to
``dc:subject``, is a category and dropped), or with ``hierarchy="levels"`` every level, or with ``"path"`` the whole
path joined by ``/``.

Machine-made keywords are not the library's: a keyword under the mark (``mark``, vlbatch's keyword root, ``AI``
by default: ``AI|sunset``, ``AI/sunset``), the same words flat beside it, and the mark itself are left out. A packet
vlbatch wrote (``vlbatch:job``) names its own root (``vlbatch:keywordRoot``; ``vlbatch`` in packets written before
it did), which is left out too, and the IPTC beside such an embedded packet is vlbatch's as well. A packet or a
file that cannot be read gives no keywords: a broken sidecar never fails the photo it describes.

XML is parsed with the standard library; a packet with a DTD (``<!DOCTYPE``, ``<!ENTITY``) is refused unread, as
XMP has none and entity expansion is how XML bombs work.
"""

from __future__ import annotations

import os
import re
import stat
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Literal

from vlbatch.paths import inside

__all__ = ["DEFAULT_MARK", "Hierarchy", "human_keywords", "iptc_keywords", "packet_keywords", "sidecars_of"]

Hierarchy = Literal["leaf", "levels", "path"]
DEFAULT_MARK = "AI"
_OLD_ROOT = "vlbatch"  # the root of vlbatch's sidecars before the root was written into them

_RDF = "{http://www.w3.org/1999/02/22-rdf-syntax-ns#}"
_VLBATCH = "{https://vlbatch.dev/ns/1.0/}"
_FLAT = "{http://purl.org/dc/elements/1.1/}subject"
_TREES = {  # field -> its level separator
    "{http://ns.adobe.com/lightroom/1.0/}hierarchicalSubject": "|",
    "{http://www.digikam.org/ns/1.0/}TagsList": "/",
}
_XMP_APP1_ID = b"http://ns.adobe.com/xap/1.0/\x00"
_PHOTOSHOP_ID = b"Photoshop 3.0\x00"
_MAX_SIDECAR_BYTES = 16 << 20  # darktable's sidecars carry the edit history: large, never this large
_MAX_SCAN_BYTES = 16 << 20  # how much of a non-JPEG file is searched for its packet
_SCAN_BLOCK = 256 << 10  # read a block at a time: a RAW's packet is near its start, and the rest is never read
_OPEN, _CLOSE = b"<x:xmpmeta", b"</x:xmpmeta>"
_JPEG_HEADER_BYTES = 32 << 20  # every APP segment together, at most
_MAX_JUNK_BYTES = 4096  # between two segments; more is not a JPEG header any longer


@dataclass
class _Packet:
    """The keyword fields of one XMP packet, and whether vlbatch wrote it."""

    flat: list[str] = field(default_factory=list)
    trees: list[tuple[str, ...]] = field(default_factory=list)
    ours: bool = False
    root: str | None = None  # the keyword root a packet of ours names


def sidecars_of(photo: Path) -> list[Path]:
    """The sidecar names a photo may have, in the order they are read."""
    names = [photo.name + ".xmp", photo.name + ".XMP", photo.stem + ".xmp", photo.stem + ".XMP"]
    return [photo.with_name(n) for n in dict.fromkeys(names)]


def human_keywords(
    photo: Path,
    *,
    hierarchy: Hierarchy = "leaf",
    mark: str = DEFAULT_MARK,
    roots: Sequence[Path] | None = None,
) -> list[str]:
    """``photo``'s human keywords (see the module's docstring), in the order the source lists them, each once
    (case-insensitively); empty when it has none.

    ``roots``: the folders a service may read (a tenant's): a sidecar whose real path lies outside them (a link
    out of the album) is not read. None, for a command reading its user's own folder, reads every sidecar."""
    for sidecar in sidecars_of(photo):
        if roots is not None and not inside(sidecar, roots):
            continue
        packet = _read_sidecar(sidecar)
        if packet is not None:
            found = packet_keywords(packet, hierarchy=hierarchy, mark=mark)
            if found:
                return found
    embedded_xmp, iptc = _embedded(photo)
    if embedded_xmp is not None:
        found = packet_keywords(embedded_xmp, hierarchy=hierarchy, mark=mark)
        if found:
            return found
        if _parse(embedded_xmp).ours:  # our JPEG copy: its IPTC keywords are ours too
            return []
    return _unique(iptc_keywords(iptc)) if iptc else []


def packet_keywords(packet: bytes, *, hierarchy: Hierarchy = "leaf", mark: str = DEFAULT_MARK) -> list[str]:
    """The human keywords of one XMP packet (a sidecar's bytes, or a file's embedded packet)."""
    parsed = _parse(packet)
    marks = {_levels(mark)}
    if parsed.ours:
        marks.add(_levels(parsed.root or _OLD_ROOT))
    marks.discard(())

    def marked(tree: tuple[str, ...]) -> int:
        """How many of ``tree``'s first levels are a mark (0: a person's keyword)."""
        folded = tuple(level.casefold() for level in tree)
        return max((len(m) for m in marks if len(m) < len(folded) and folded[: len(m)] == m), default=0)

    human = [t for t in parsed.trees if not marked(t)]
    machine = {level.casefold() for t in parsed.trees if (n := marked(t)) for level in t[n:]}
    machine |= {level for m in marks for level in m}  # Lightroom lists a keyword's parents in dc:subject too
    levels = {level.casefold() for t in human for level in t}
    flat = [k for k in parsed.flat if k.casefold() not in machine or k.casefold() in levels]
    if hierarchy == "levels":
        return _unique([*flat, *(level for t in human for level in t)])
    inner = {level.casefold() for t in human for level in (t if hierarchy == "path" else t[:-1])}
    kept = [k for k in flat if k.casefold() not in inner]
    return _unique([*kept, *(t[-1] if hierarchy == "leaf" else "/".join(t) for t in human)])


def _levels(root: str) -> tuple[str, ...]:
    return tuple(p.strip().casefold() for p in re.split(r"[|/]", root) if p.strip())


def iptc_keywords(iim: bytes) -> list[str]:
    """The Keywords (2:25) of IPTC-IIM data, decoded as its CodedCharacterSet (1:90) says: UTF-8 when it is
    ``ESC % G``, else UTF-8 when they are valid UTF-8 and Latin-1 when not (what older tools wrote)."""
    utf8 = False
    raw: list[bytes] = []
    for record, number, value in _datasets(iim):
        if (record, number) == (1, 90):
            utf8 = value == b"\x1b%G"
        elif (record, number) == (2, 25):
            raw.append(value)
    return [k for k in (_decode(v, utf8).strip() for v in raw) if k]


def _decode(value: bytes, utf8: bool) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return value.decode("utf-8" if utf8 else "latin-1", "replace" if utf8 else "strict")


def _datasets(iim: bytes) -> Iterator[tuple[int, int, bytes]]:
    pos = 0
    while pos + 5 <= len(iim) and iim[pos] == 0x1C:
        record, number, size = iim[pos + 1], iim[pos + 2], int.from_bytes(iim[pos + 3 : pos + 5], "big")
        pos += 5
        if size & 0x8000:  # an extended dataset: the low bits count the bytes of its length
            width = size & 0x7FFF
            size = int.from_bytes(iim[pos : pos + width], "big")
            pos += width
        if pos + size > len(iim):
            return
        yield record, number, iim[pos : pos + size]
        pos += size


def _unique(keywords: Iterable[str]) -> list[str]:
    seen: dict[str, str] = {}
    for k in keywords:
        k = k.strip()
        if k:
            seen.setdefault(k.casefold(), k)
    return list(seen.values())


def _open_regular(path: Path) -> BinaryIO | None:
    """``path`` opened for reading when it is a regular file: opened without blocking and checked on the open
    descriptor, so a FIFO or a device named like a photo or its sidecar never stalls the reader."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            return None
        return os.fdopen(fd, "rb")
    except OSError:
        os.close(fd)
        return None


def _read_sidecar(path: Path) -> bytes | None:
    fh = _open_regular(path)
    if fh is None:
        return None
    with fh:
        try:
            data = fh.read(_MAX_SIDECAR_BYTES + 1)
        except OSError:
            return None
    return data if len(data) <= _MAX_SIDECAR_BYTES else None


def _parse(packet: bytes) -> _Packet:
    out = _Packet()
    start, end = packet.find(b"<x:xmpmeta"), packet.rfind(b"</x:xmpmeta>")
    if start >= 0 and end > start:  # a packet inside a file, or a sidecar with xpacket wrappers
        packet = packet[start : end + len(b"</x:xmpmeta>")]
    if b"<!DOCTYPE" in packet or b"<!ENTITY" in packet:
        return out
    try:
        root = ET.fromstring(packet)
    except ET.ParseError:
        return out
    for element in root.iter():
        if element.tag == f"{_RDF}Description":
            if f"{_VLBATCH}job" in element.attrib:
                out.ours = True
            out.root = element.attrib.get(f"{_VLBATCH}keywordRoot", out.root)
        elif element.tag == f"{_VLBATCH}job":  # a rewriting tool may turn attributes into elements
            out.ours = True
        elif element.tag == f"{_VLBATCH}keywordRoot" and element.text:
            out.root = element.text.strip()
        elif element.tag == _FLAT:
            out.flat += _items(element)
        elif element.tag in _TREES:
            separator = _TREES[element.tag]
            for item in _items(element):
                levels = tuple(p.strip() for p in item.split(separator) if p.strip())
                if separator == "/":  # digiKam spells a "/" inside a tag "|" (as vlbatch writes it)
                    levels = tuple(p.replace("|", "/") for p in levels)
                if levels:
                    out.trees.append(levels)
    return out


def _items(element: ET.Element) -> list[str]:
    """The rdf:li texts of a Bag or Seq property; a property given as plain text counts as one item."""
    items = [li.text.strip() for li in element.iter(f"{_RDF}li") if li.text and li.text.strip()]
    if not items and element.text and element.text.strip():
        items = [element.text.strip()]
    return items


def _embedded(photo: Path) -> tuple[bytes | None, bytes | None]:
    """The file's own XMP packet and IPTC-IIM data (None where it has none)."""
    opened = _open_regular(photo)
    if opened is None:
        return None, None
    try:
        with opened as fh:
            if fh.read(2) == b"\xff\xd8":
                return _jpeg_metadata(fh)
            fh.seek(0)
            return _scanned_packet(fh), None
    except OSError:
        return None, None


def _scanned_packet(fh: BinaryIO) -> bytes | None:
    """The first XMP packet in the first ``_MAX_SCAN_BYTES`` of a file (PNG, TIFF, HEIF, RAW...), block by block."""
    head = b""
    read = 0
    while read < _MAX_SCAN_BYTES:
        block = fh.read(_SCAN_BLOCK)
        if not block:
            return None
        read += len(block)
        head += block
        start = head.find(_OPEN)
        if start < 0:
            head = head[-(len(_OPEN) - 1) :]  # only a marker cut by the block's end is kept
            continue
        end = head.find(_CLOSE, start)
        if end >= 0:
            return head[start : end + len(_CLOSE)]
        head = head[start:]
    return None


def _jpeg_metadata(fh: BinaryIO) -> tuple[bytes | None, bytes | None]:
    """A JPEG's XMP (its first XMP APP1) and IPTC (the IPTC-NAA resources of its Photoshop APP13 segments, which
    a long block spans in order), read segment by segment up to the image data."""
    xmp: bytes | None = None
    photoshop = b""
    read = 0
    while read < _JPEG_HEADER_BYTES:
        marker = _next_marker(fh)
        if marker is None or marker in (0xDA, 0xD9):  # the image data (or the end): no more metadata
            break
        length = fh.read(2)
        size = int.from_bytes(length, "big") - 2
        if len(length) < 2 or size < 0:
            break
        read += size + 4
        if marker in (0xE1, 0xED):
            payload = fh.read(size)
            if marker == 0xE1 and xmp is None and payload.startswith(_XMP_APP1_ID):
                xmp = payload[len(_XMP_APP1_ID) :]
            elif marker == 0xED and payload.startswith(_PHOTOSHOP_ID):
                photoshop += payload[len(_PHOTOSHOP_ID) :]
        else:
            fh.seek(size, 1)
    return xmp, _iptc_resource(photoshop) or None


def _next_marker(fh: BinaryIO) -> int | None:
    """The next segment's marker: junk bytes some writers leave between segments are skipped (as exiftool and
    Pillow skip them), and so are fill bytes (``0xFF`` repeated)."""
    byte = fh.read(1)
    skipped = 0
    while byte and byte != b"\xff":
        skipped += 1
        if skipped > _MAX_JUNK_BYTES:
            return None
        byte = fh.read(1)
    marker = fh.read(1)
    while marker == b"\xff":
        marker = fh.read(1)
    return marker[0] if marker else None


def _iptc_resource(resources: bytes) -> bytes:
    """The data of the IPTC-NAA (0x0404) 8BIM resources among Photoshop image resources."""
    iim = b""
    pos = 0
    while pos + 12 <= len(resources) and resources[pos : pos + 4] == b"8BIM":
        resource_id = int.from_bytes(resources[pos + 4 : pos + 6], "big")
        name_end = pos + 7 + resources[pos + 6]
        name_end += (name_end - pos) % 2  # the name, with its length byte, is padded to an even length
        size = int.from_bytes(resources[name_end : name_end + 4], "big")
        data = resources[name_end + 4 : name_end + 4 + size]
        if resource_id == 0x0404:
            iim += data
        pos = name_end + 4 + size + size % 2
    return iim

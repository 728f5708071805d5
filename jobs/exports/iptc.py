"""IPTC-IIM keywords and caption for a JPEG copy, in the Photoshop APP13 segment where photo managers and
``exiftool`` read ``IPTC:Keywords`` (the last place Immich looks, after ``digiKam:TagsList`` and
``lr:hierarchicalSubject``; older tools look only here).

The block is UTF-8 (CodedCharacterSet ``ESC % G``) and carries an ``IPTCDigest`` (the MD5 of the IIM data), as
the Metadata Working Group asks, so a reader knows the IPTC and the XMP beside it agree. Pure functions over bytes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

__all__ = ["PHOTOSHOP_ID", "iptc_resources", "photoshop_segment_payload"]

PHOTOSHOP_ID = b"Photoshop 3.0\x00"
_IPTC_NAA = 0x0404  # the 8BIM resource that holds the IIM data
_IPTC_DIGEST = 0x0425
_KEYWORD_BYTES = 64  # IIM 2:25 holds at most 64 octets
_CAPTION_BYTES = 2000  # IIM 2:120


_CONTROLS = dict.fromkeys([*range(0x20), 0x7F])  # a model's answer may hold raw control characters


def _cut(text: str, limit: int) -> bytes:
    """``text`` without control characters, as UTF-8 in at most ``limit`` bytes, never cutting a character."""
    return text.translate(_CONTROLS).encode("utf-8")[:limit].decode("utf-8", "ignore").encode("utf-8")


def _dataset(record: int, number: int, value: bytes) -> bytes:
    return bytes((0x1C, record, number)) + len(value).to_bytes(2, "big") + value


def _resource(resource_id: int, data: bytes) -> bytes:
    """An 8BIM image resource with an empty name, padded to an even length."""
    pad = b"\x00" if len(data) % 2 else b""
    return b"8BIM" + resource_id.to_bytes(2, "big") + b"\x00\x00" + len(data).to_bytes(4, "big") + data + pad


def iptc_resources(tags: Sequence[str], caption: str | None) -> bytes:
    """The IPTC-NAA and IPTCDigest resources for ``tags`` (IIM 2:25 Keywords) and ``caption`` (2:120)."""
    iim = _dataset(1, 90, b"\x1b%G") + _dataset(2, 0, b"\x00\x04")
    for tag in tags:
        keyword = _cut(tag.strip(), _KEYWORD_BYTES)
        if keyword:
            iim += _dataset(2, 25, keyword)
    if caption:
        iim += _dataset(2, 120, _cut(caption, _CAPTION_BYTES))
    return _resource(_IPTC_NAA, iim) + _resource(_IPTC_DIGEST, hashlib.md5(iim).digest())


def photoshop_segment_payload(existing: bytes | None, ours: bytes) -> bytes:
    """An APP13 payload: ``existing``'s image resources (a payload after its ``Photoshop 3.0`` id) without their
    IPTC ones, then ``ours``. Resources that do not parse end the walk: what follows them is dropped, never
    misread as ours."""
    kept = b""
    pos = 0
    while existing is not None and pos + 12 <= len(existing) and existing[pos : pos + 4] == b"8BIM":
        resource_id = int.from_bytes(existing[pos + 4 : pos + 6], "big")
        name_len = existing[pos + 6]
        name_end = pos + 6 + 1 + name_len
        name_end += (name_end - pos) % 2  # the name (with its length byte) is padded to an even length
        if name_end + 4 > len(existing):
            break
        size = int.from_bytes(existing[name_end : name_end + 4], "big")
        end = name_end + 4 + size + size % 2
        if end > len(existing):
            break
        if resource_id not in (_IPTC_NAA, _IPTC_DIGEST):
            kept += existing[pos:end]
        pos = end
    return PHOTOSHOP_ID + kept + ours

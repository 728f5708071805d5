"""XMP metadata for tags and captions, in the fields photo managers read, with the mark and the provenance that
tell vlbatch's keywords from a person's.

``dc:subject`` holds the flat keywords (digiKam, darktable, Lightroom and Immich all read it),
``lr:hierarchicalSubject`` the model's keywords under one root, the mark (``AI|sunset``), so a photo manager shows
them as a group that can be filtered or removed in one step, ``digiKam:TagsList`` the same tree in digiKam's
spelling (``AI/sunset``: Immich reads this field first, then ``lr:hierarchicalSubject``, then ``IPTC:Keywords``),
and ``dc:description`` the caption. Keywords a person added by hand in vlbatch are not machine-made: they stand at
the top of the trees, unmarked. The root is ``VLBATCH_XMP_KEYWORD_ROOT``; levels in it (``AI/vlbatch``) nest.

A packet carries, in vlbatch's namespace (``MARKER_NS``), ``vlbatch:job`` (so that a sidecar written here can be
told from one a person or another program wrote: only ours is ever replaced), ``vlbatch:keywordRoot`` (so a reader
knows which keywords are ours after the root was changed) and the answer's provenance: ``vlbatch:model``,
``vlbatch:modelRevision``, ``vlbatch:pipelineVersion``, ``vlbatch:optionsHash`` and ``vlbatch:promptHash``.

Pure functions over bytes: the packet, and a JPEG copy with the packet in its APP1 segment and the keywords as
IPTC in its APP13 (``jobs/exports/iptc.py``). Nothing here touches an original file.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from xml.sax.saxutils import escape, quoteattr

from jobs.exports.iptc import PHOTOSHOP_ID, photoshop_segment_payload
from vlbatch.errors import XMP_ERROR, VlbatchError

__all__ = [
    "DEFAULT_KEYWORD_ROOT",
    "MARKER_NS",
    "Provenance",
    "XmpError",
    "is_ours",
    "jpeg_with_xmp",
    "root_levels",
    "xmp_packet",
]

MARKER_NS = "https://vlbatch.dev/ns/1.0/"
DEFAULT_KEYWORD_ROOT = "AI"
_XMP_APP1_ID = b"http://ns.adobe.com/xap/1.0/\x00"
_APP1_MAX = 65533 - len(_XMP_APP1_ID)  # a segment's length field counts itself (2 bytes) and is 16-bit
# Characters XML 1.0 cannot hold at all; a model's answer may contain raw control characters.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


class XmpError(VlbatchError):
    """A JPEG that cannot take the packet (not a JPEG, or a packet too big for one APP1 segment)."""

    code = XMP_ERROR


def _text(value: str) -> str:
    return escape(_NOT_XML.sub("", value))


@dataclass(frozen=True)
class Provenance:
    """What made an answer: the reuse key's parts (``vlbatch.db.reuse``), as a result record holds them."""

    model: str | None = None
    model_revision: str | None = None
    pipeline_version: str | None = None
    options_hash: str | None = None
    prompt_hash: str | None = None


_PROVENANCE_ATTRIBUTES = {
    "model": "model",
    "model_revision": "modelRevision",
    "pipeline_version": "pipelineVersion",
    "options_hash": "optionsHash",
    "prompt_hash": "promptHash",
}


def root_levels(keyword_root: str) -> list[str]:
    """The levels of a keyword root: ``AI``, or ``AI/vlbatch`` (``|`` or ``/`` between levels)."""
    return [level for level in (_NOT_XML.sub("", p).strip() for p in re.split(r"[|/]", keyword_root)) if level]


def xmp_packet(
    tags: Sequence[str],
    caption: str | None,
    *,
    job_id: str,
    keyword_root: str = DEFAULT_KEYWORD_ROOT,
    manual: Collection[str] = (),
    provenance: Provenance | None = None,
) -> bytes:
    """An XMP packet (UTF-8) with ``tags`` as keywords, flat and in the trees: under ``keyword_root`` (the mark),
    except those in ``manual`` (added by a person), and ``caption``; the provenance in vlbatch's namespace."""
    levels = root_levels(keyword_root)
    if not levels:  # unmarked machine keywords could not be told from a person's
        raise XmpError("the keyword root is empty: machine-made keywords need a mark")
    entries = [(t, tag in manual) for tag in tags if (t := _text(tag).strip())]
    flat = "".join(f"<rdf:li>{k}</rdf:li>" for k, _ in entries)
    # "|" separates levels in lr:hierarchicalSubject: a tag holding one would open a level of its own.
    lr_root = "".join(f"{_text(level)}|" for level in levels)
    nested = "".join(f"<rdf:li>{'' if by_hand else lr_root}{k.replace('|', '/')}</rdf:li>" for k, by_hand in entries)
    # "/" separates levels in digiKam:TagsList: inside a tag it becomes "|", as Immich spells such a tag when it
    # reads lr:hierarchicalSubject, so either field gives Immich the same tags.
    dk_root = "".join(f"{_text(level)}/" for level in levels)
    digikam = "".join(f"<rdf:li>{'' if by_hand else dk_root}{k.replace('/', '|')}</rdf:li>" for k, by_hand in entries)
    description = (
        f'<dc:description><rdf:Alt><rdf:li xml:lang="x-default">{_text(caption)}</rdf:li></rdf:Alt></dc:description>'
        if caption
        else ""
    )
    made_by = "".join(
        f"\n    vlbatch:{name}={quoteattr(_NOT_XML.sub('', value))}"
        for field, name in _PROVENANCE_ATTRIBUTES.items()
        if (value := getattr(provenance, field, None))
    )
    body = (
        '<?xpacket begin="\ufeff" id="W5M0MpCehiHzreSzNTczkc9d"?>\n'
        '<x:xmpmeta xmlns:x="adobe:ns:meta/">\n'
        ' <rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#">\n'
        '  <rdf:Description rdf:about=""\n'
        '    xmlns:dc="http://purl.org/dc/elements/1.1/"\n'
        '    xmlns:lr="http://ns.adobe.com/lightroom/1.0/"\n'
        '    xmlns:digiKam="http://www.digikam.org/ns/1.0/"\n'
        f'    xmlns:vlbatch="{MARKER_NS}"\n'
        f"    vlbatch:job={quoteattr(_NOT_XML.sub('', job_id))}\n"
        f"    vlbatch:keywordRoot={quoteattr('/'.join(levels))}{made_by}>\n"
        f"   <dc:subject><rdf:Bag>{flat}</rdf:Bag></dc:subject>\n"
        f"   <lr:hierarchicalSubject><rdf:Bag>{nested}</rdf:Bag></lr:hierarchicalSubject>\n"
        f"   <digiKam:TagsList><rdf:Seq>{digikam}</rdf:Seq></digiKam:TagsList>\n"
        f"   {description}\n"
        "  </rdf:Description>\n"
        " </rdf:RDF>\n"
        "</x:xmpmeta>\n"
        '<?xpacket end="w"?>\n'
    )
    return body.encode("utf-8")


def is_ours(packet: bytes) -> bool:
    """True when ``packet`` (a sidecar's bytes) was written by vlbatch and may be replaced."""
    return MARKER_NS.encode() in packet


def jpeg_with_xmp(jpeg: bytes, packet: bytes, *, iptc: bytes | None = None) -> bytes:
    """``jpeg`` with ``packet`` as its XMP: an existing XMP APP1 segment is replaced, else one is added after
    the JFIF/EXIF headers. With ``iptc`` (``jobs.exports.iptc.iptc_resources``), the IPTC resources of the
    Photoshop APP13 segment are replaced by those, its other resources kept. The image data is copied byte for
    byte."""
    if jpeg[:2] != b"\xff\xd8":
        raise XmpError("not a JPEG file (no SOI marker)")
    if len(packet) > _APP1_MAX:
        raise XmpError(f"XMP packet of {len(packet)} bytes does not fit one APP1 segment ({_APP1_MAX})")
    segment = b"\xff\xe1" + (len(_XMP_APP1_ID) + len(packet) + 2).to_bytes(2, "big") + _XMP_APP1_ID + packet
    photoshop: bytes | None = None  # the first Photoshop APP13 payload, after its id
    pos, insert_at, kept = 2, 2, bytearray(b"\xff\xd8")
    while True:
        if pos + 4 > len(jpeg) or jpeg[pos] != 0xFF:
            raise XmpError("JPEG headers are malformed or end before the image data")
        marker = jpeg[pos + 1]
        if marker in (0xDA, 0xD9):  # start of scan / end of image: the headers are over
            break
        length = int.from_bytes(jpeg[pos + 2 : pos + 4], "big")
        if length < 2 or pos + 2 + length > len(jpeg):
            raise XmpError("JPEG header segment runs past the end of the file")
        seg = jpeg[pos : pos + 2 + length]
        pos += 2 + length
        if marker == 0xE1 and seg[4:].startswith(_XMP_APP1_ID):
            continue  # the old XMP: replaced below
        if iptc is not None and marker == 0xED and seg[4:].startswith(PHOTOSHOP_ID):
            if photoshop is None:  # its other resources go into ours; a second such segment is dropped
                photoshop = seg[4 + len(PHOTOSHOP_ID) :]
            continue
        kept += seg
        if marker in (0xE0, 0xE1):  # JFIF and EXIF stay first, as readers expect
            insert_at = len(kept)
    if iptc is not None:
        payload = photoshop_segment_payload(photoshop, iptc)
        if len(payload) > 65533:
            raise XmpError(f"IPTC block of {len(payload)} bytes does not fit one APP13 segment (65533)")
        segment += b"\xff\xed" + (len(payload) + 2).to_bytes(2, "big") + payload
    return bytes(kept[:insert_at]) + segment + bytes(kept[insert_at:]) + jpeg[pos:]

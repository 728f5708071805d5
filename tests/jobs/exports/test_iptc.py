"""IPTC keywords in a JPEG copy's Photoshop segment, read back with exiftool: a copy made again replaces the IPTC
it had, and keeps the segment's other resources (here the print resolution) as they were."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from PIL import Image

from jobs.exports.iptc import iptc_resources, photoshop_segment_payload
from jobs.exports.xmp_packet import jpeg_with_xmp, xmp_packet
from tests.support.exiftool import as_list, exiftool_tags

# Photoshop's ResolutionInfo (0x03ED): 300 dpi across and down, a resource that is not ours to drop.
_RESOLUTION = b"8BIM\x03\xed\x00\x00\x00\x00\x00\x10" + b"\x01\x2c\x00\x00\x00\x01\x00\x01" * 2


def test_a_copy_made_again_replaces_its_iptc_and_keeps_the_other_resources(tmp_path: Path) -> None:
    buf = io.BytesIO()
    Image.new("RGB", (16, 16), (5, 6, 7)).save(buf, format="JPEG")
    first = jpeg_with_xmp(
        buf.getvalue(), xmp_packet(["old"], None, job_id="1"), iptc=_RESOLUTION + iptc_resources(["old"], None)
    )
    again = jpeg_with_xmp(
        first, xmp_packet(["new", "fresh"], "Now", job_id="2"), iptc=iptc_resources(["new", "fresh"], "Now")
    )
    assert again.count(b"Photoshop 3.0\x00") == 1
    path = tmp_path / "copy.jpg"
    path.write_bytes(again)
    got = exiftool_tags(path)
    assert as_list(got["IPTC:Keywords"]) == ["new", "fresh"]
    assert got["IPTC:Caption-Abstract"] == "Now"
    assert got["Photoshop:XResolution"] == 300
    assert got["Photoshop:IPTCDigest"] == got["File:CurrentIPTCDigest"]
    with Image.open(path) as img:  # the image data is copied as it was
        assert img.getpixel((8, 8)) == pytest.approx((5, 6, 7), abs=3)


def test_resources_that_do_not_parse_are_dropped_not_misread() -> None:
    ours = iptc_resources(["a"], None)
    assert (
        photoshop_segment_payload(_RESOLUTION + b"8BIM\x04\x04\x00", ours) == b"Photoshop 3.0\x00" + _RESOLUTION + ours
    )

"""A photo's human keywords (``preprocessing.keywords``) from sidecars as digiKam and Lightroom write them, from XMP
and IPTC embedded by exiftool, and never vlbatch's own: every keyword field is read, and exiftool reads the same
keywords from each file."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from jobs.exports.iptc import iptc_resources
from jobs.exports.xmp_packet import jpeg_with_xmp, xmp_packet
from preprocessing.keywords import human_keywords, packet_keywords
from tests.support.exiftool import as_list, exiftool_tags

LIBRARY = Path(__file__).resolve().parents[1] / "fixtures" / "sidecars"

LEAVES = {
    "digikam/harbour.jpg": ["Bergen", "boat", "harbour"],
    "digikam/bikes.jpg": ["street", "Anna"],
    "lightroom/dog.jpg": ["beach", "dog", "été"],
    "embedded/market.jpg": ["market", "fruit", "Fès"],
    "embedded/old-iptc.jpg": ["café", "street food"],
}


def _exiftool_keywords(path: Path, *, charset: str = "UTF8") -> set[str]:
    """Every level of every keyword exiftool reads in the file's keyword fields (the photo's sidecar, else the
    photo), less the trees under the mark ``AI`` and their words."""
    tags: dict[str, Any] = exiftool_tags(path, iptc_charset=charset)
    trees = [t.split("|") for t in as_list(tags.get("XMP-lr:HierarchicalSubject", []))]
    trees += [t.split("/") for t in as_list(tags.get("XMP-digiKam:TagsList", []))]
    machine = {level for t in trees if t[0] == "AI" for level in t}
    flat = as_list(tags.get("XMP-dc:Subject", [])) or as_list(tags.get("IPTC:Keywords", []))
    human = {level for t in trees if t[0] != "AI" for level in t}
    return human | {str(k) for k in flat if k not in machine or k in human}


@pytest.mark.parametrize("name", sorted(LEAVES))
def test_the_librarys_keywords_are_read_as_exiftool_reads_them(name: str) -> None:
    photo = LIBRARY / name
    assert human_keywords(photo) == LEAVES[name]
    source = next((p for p in (photo.with_name(photo.name + ".xmp"), photo.with_suffix(".xmp")) if p.exists()), photo)
    every_level = set(human_keywords(photo, hierarchy="levels"))
    assert every_level == _exiftool_keywords(source, charset="Latin" if "old-iptc" in name else "UTF8")


def test_every_keyword_field_is_read_from_a_sidecar_exiftool_wrote(tmp_path: Path) -> None:
    if shutil.which("exiftool") is None:
        pytest.skip("exiftool is not installed")
    photo = tmp_path / "p.jpg"
    Image.new("RGB", (8, 8)).save(photo)
    sidecar = photo.with_name("p.jpg.xmp")
    subprocess.run(
        [
            "exiftool", "-q", "-o", str(sidecar),
            "-XMP-dc:Subject=only in dc", "-XMP-lr:HierarchicalSubject=Topic|only in lr",
            "-XMP-digiKam:TagsList=Topic/only in digiKam", str(photo),
        ],
        check=True,
        timeout=60,
    )  # fmt: skip
    # In the packet's order, which is exiftool's to choose.
    assert set(human_keywords(photo)) == {"only in dc", "only in lr", "only in digiKam"}
    assert set(human_keywords(photo, hierarchy="path")) == {"only in dc", "Topic/only in lr", "Topic/only in digiKam"}
    assert set(human_keywords(photo, hierarchy="levels")) == {"only in dc", "Topic", "only in lr", "only in digiKam"}


def test_the_sidecar_comes_first_then_the_embedded_xmp_then_iptc(tmp_path: Path) -> None:
    photo = tmp_path / "market.jpg"
    shutil.copy(LIBRARY / "embedded" / "market.jpg", photo)
    assert human_keywords(photo) == ["market", "fruit", "Fès"]  # XMP before IPTC
    stem = photo.with_name("market.xmp")  # Lightroom's naming
    stem.write_bytes((LIBRARY / "lightroom" / "dog.xmp").read_bytes())
    assert human_keywords(photo) == ["beach", "dog", "été"]
    photo.with_name("market.jpg.xmp").write_bytes((LIBRARY / "digikam" / "harbour.jpg.xmp").read_bytes())
    assert human_keywords(photo) == ["Bergen", "boat", "harbour"]  # digiKam's naming before Lightroom's
    photo.with_name("market.jpg.xmp").write_bytes(b"<x:xmpmeta><rdf:RDF")  # broken: the next source speaks
    assert human_keywords(photo) == ["beach", "dog", "été"]
    stem.write_bytes(b'<!DOCTYPE x [<!ENTITY a "aaaa">]><x:xmpmeta xmlns:x="adobe:ns:meta/">&a;</x:xmpmeta>')
    assert human_keywords(photo) == ["market", "fruit", "Fès"]  # a DTD is refused unread


def test_vlbatchs_own_keywords_are_not_the_librarys(tmp_path: Path) -> None:
    photo = tmp_path / "p.jpg"
    shutil.copy(LIBRARY / "embedded" / "market.jpg", photo)
    sidecar = photo.with_name("p.jpg.xmp")
    # Our sidecar: the model's keywords under the mark, one a person added in vlbatch beside them.
    sidecar.write_bytes(xmp_packet(["stall", "fruit", "Mina"], None, job_id="j", manual={"Mina"}))
    assert human_keywords(photo) == ["Mina"]
    sidecar.write_bytes(xmp_packet(["stall"], None, job_id="j"))
    assert human_keywords(photo) == ["market", "fruit", "Fès"]  # nothing human in it: the embedded XMP speaks
    # Another root: the sidecar names it, so its keywords stay ours whatever the reader's mark.
    sidecar.write_bytes(xmp_packet(["stall"], None, job_id="j", keyword_root="Machine/vlbatch"))
    assert human_keywords(photo, mark="AI") == ["market", "fruit", "Fès"]
    # A sidecar written before the root was named in it: its root was "vlbatch".
    old = b"vlbatch:job='j'>" + b"<dc:subject><rdf:Bag><rdf:li>stall</rdf:li></rdf:Bag></dc:subject>"
    old += b"<lr:hierarchicalSubject><rdf:Bag><rdf:li>vlbatch|stall</rdf:li></rdf:Bag></lr:hierarchicalSubject>"
    packet = (
        b'<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#">'
        b'<rdf:Description xmlns:dc="http://purl.org/dc/elements/1.1/" xmlns:lr="http://ns.adobe.com/lightroom/1.0/"'
        b' xmlns:vlbatch="https://vlbatch.dev/ns/1.0/" ' + old + b"</rdf:Description></rdf:RDF></x:xmpmeta>"
    )
    assert packet_keywords(packet) == []
    # A JPEG copy vlbatch wrote: its XMP and its IPTC are both ours.
    sidecar.unlink()
    copy = jpeg_with_xmp(
        photo.read_bytes(), xmp_packet(["stall"], None, job_id="j"), iptc=iptc_resources(["stall"], None)
    )
    photo.write_bytes(copy)
    assert human_keywords(photo) == []
    assert as_list(exiftool_tags(photo)["IPTC:Keywords"]) == ["stall"]  # there, but not the library's


def test_a_photo_without_keywords_or_unreadable_has_none(tmp_path: Path) -> None:
    photo = tmp_path / "plain.png"
    Image.new("RGB", (8, 8)).save(photo)
    assert human_keywords(photo) == []
    assert human_keywords(tmp_path / "missing.jpg") == []
    (tmp_path / "cut.jpg").write_bytes(b"\xff\xd8\xff\xe1\x00")
    assert human_keywords(tmp_path / "cut.jpg") == []


def test_xmp_embedded_in_other_formats_is_found_block_by_block(tmp_path: Path) -> None:
    if shutil.which("exiftool") is None:
        pytest.skip("exiftool is not installed")
    png = tmp_path / "p.png"
    Image.new("RGB", (8, 8)).save(png)
    subprocess.run(
        [
            "exiftool",
            "-q",
            "-overwrite_original",
            "-XMP-dc:Subject=lighthouse",
            "-XMP-lr:HierarchicalSubject=AI|sea",
            str(png),
        ],
        check=True,
        timeout=60,
    )
    assert human_keywords(png) == ["lighthouse"]
    packet = (LIBRARY / "lightroom" / "dog.xmp").read_bytes()
    for cut in (3, len(b"<x:xmpmeta") + 5, 400):  # the packet's markers across the first block's end
        raw = tmp_path / f"cut{cut}.dng"
        raw.write_bytes(b"II*\x00" + b"\x00" * (256 * 1024 - 4 - cut) + packet + b"\x00" * 1000)
        assert human_keywords(raw) == ["beach", "dog", "été"], cut


def test_junk_and_fill_bytes_between_a_jpegs_segments_are_skipped_as_exiftool_skips_them(tmp_path: Path) -> None:
    data = (LIBRARY / "embedded" / "market.jpg").read_bytes()
    photo = tmp_path / "junk.jpg"
    after_app0 = 4 + int.from_bytes(data[4:6], "big")  # junk, then fill bytes, before the XMP's segment
    photo.write_bytes(data[:after_app0] + b"\x00junk\xff\xff" + data[after_app0:])
    assert human_keywords(photo) == ["market", "fruit", "Fès"]
    tags = exiftool_tags(photo)
    assert as_list(tags["XMP-dc:Subject"]) == ["market", "fruit"] and "Skipped unknown" in tags["ExifTool:Warning"]

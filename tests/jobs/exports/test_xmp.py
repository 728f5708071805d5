"""XMP sidecars and JPEG copies for a finished tagging job, read back with exiv2 (the library digiKam and
darktable read XMP with), on SQLite and PostgreSQL."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from jobs.exports.xmp import sidecar_path, write_job_sidecars
from jobs.exports.xmp_packet import XmpError, jpeg_with_xmp, xmp_packet
from tests.support.exiftool import as_list, exiftool_tags
from tests.support.ledger import finished_job

pyexiv2 = pytest.importorskip("pyexiv2")


def _read_xmp(path: Path) -> dict[str, Any]:
    img = pyexiv2.Image(str(path))
    try:
        data: dict[str, Any] = img.read_xmp()
        return data
    finally:
        img.close()


def _photo(path: Path, colour: tuple[int, int, int], *, orientation: int | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    exif = Image.Exif()
    if orientation is not None:
        exif[0x0112] = orientation
    Image.new("RGB", (64, 48), colour).save(path, format="JPEG", quality=90, exif=exif.tobytes())
    return path


def test_sidecars_and_jpeg_copies_read_back_with_exiv2(db_url: str, tmp_path: Path) -> None:
    album = tmp_path / "album"
    beach = _photo(album / "2026" / "beach.jpg", (250, 120, 40), orientation=6)
    left, right = _photo(album / "burst" / "a.jpg", (9, 9, 9)), _photo(album / "burst" / "b.jpeg", (20, 9, 9))
    broken = _photo(album / "broken.jpg", (1, 1, 1))
    mine = _photo(album / "mine.jpg", (0, 90, 0))
    foreign = mine.with_name("mine.jpg.xmp")
    foreign.write_bytes(xmp_packet(["kept"], None, job_id="x").replace(b"vlbatch", b"someoneelse"))
    originals = {p: p.read_bytes() for p in (beach, left, right, mine)}
    factory, job_id = finished_job(
        db_url,
        [
            ({"images": [str(beach)]}, {"tags": ["sunset", "sea & sand", "a|b", "x\x01y"], "caption": "Sun <low>"}),
            ({"images": [str(left), f"file://{right}"]}, {"tags": ["night"]}),
            ({"images": [str(broken)]}, None),
            ({"images": ["https://example.invalid/a.jpg"]}, {"tags": ["web"]}),
            ({"images": [str(mine)]}, {"tags": ["forest"], "caption": "Trees"}),
        ],
    )
    out, copies = tmp_path / "xmp", tmp_path / "copies"
    with factory() as s:
        report = write_job_sidecars(s, job_id=job_id, out_dir=out, relative_to=album, jpeg_copies=copies)
    assert (report.written, report.skipped_failed, report.skipped_not_local, report.jpeg_copies) == (4, 1, 1, 4)

    xmp = _read_xmp(out / "2026" / "beach.jpg.xmp")
    assert xmp["Xmp.dc.subject"] == ["sunset", "sea & sand", "a|b", "xy"]  # control character dropped
    assert xmp["Xmp.lr.hierarchicalSubject"] == ["AI|sunset", "AI|sea & sand", "AI|a/b", "AI|xy"]
    assert xmp["Xmp.digiKam.TagsList"] == ["AI/sunset", "AI/sea & sand", "AI/a|b", "AI/xy"]
    assert xmp["Xmp.dc.description"] == {'lang="x-default"': "Sun <low>"}
    for burst in ("a.jpg", "b.jpeg"):
        assert _read_xmp(out / "burst" / f"{burst}.xmp")["Xmp.dc.subject"] == ["night"]
        assert "Xmp.dc.description" not in _read_xmp(out / "burst" / f"{burst}.xmp")
    assert not (out / "broken.jpg.xmp").exists()

    copy = copies / "2026" / "beach.jpg"
    assert _read_xmp(copy)["Xmp.dc.subject"] == ["sunset", "sea & sand", "a|b", "xy"]
    with Image.open(copy) as got, Image.open(beach) as original:
        assert got.getexif()[0x0112] == 6  # EXIF kept in the copy
        assert got.tobytes() == original.tobytes()  # image data untouched
    assert {p: p.read_bytes() for p in originals} == originals  # originals never written

    # Beside the photos: another program's sidecar is kept, ours are replaced on a second run.
    with factory() as s:
        first = write_job_sidecars(s, job_id=job_id)
        second = write_job_sidecars(s, job_id=job_id)
    assert (first.written, first.kept_foreign) == (second.written, second.kept_foreign) == (3, 1)
    assert _read_xmp(foreign)["Xmp.dc.subject"] == ["kept"]
    assert _read_xmp(beach.with_name("beach.jpg.xmp"))["Xmp.dc.subject"][0] == "sunset"
    with factory() as s:
        forced = write_job_sidecars(s, job_id=job_id, force=True, naming="stem")
    assert forced.written == 4 and _read_xmp(mine.with_name("mine.xmp"))["Xmp.dc.subject"] == ["forest"]


def test_tags_read_back_with_exiftool_where_each_photo_manager_looks(tmp_path: Path) -> None:
    """Immich reads digiKam:TagsList, then lr:hierarchicalSubject, then IPTC:Keywords; digiKam and darktable
    dc:subject and the trees; older tools IPTC alone. exiftool reads each of them back from the sidecar and the
    JPEG copy."""
    album = tmp_path / "album"
    photo = _photo(album / "day" / "sea.jpg", (30, 90, 200), orientation=6)
    tags = ["sea", "indoor/outdoor", "été", "x" * 80]
    factory, job_id = finished_job(
        f"sqlite:///{tmp_path / 'x.db'}", [({"images": [str(photo)]}, {"tags": tags, "caption": "Blue <sea>"})]
    )
    out, copies = tmp_path / "xmp", tmp_path / "copies"
    with factory() as s:
        report = write_job_sidecars(s, job_id=job_id, out_dir=out, relative_to=album, jpeg_copies=copies)
    assert (report.written, report.jpeg_copies, report.errors) == (1, 1, 0)

    tree = ["AI/sea", "AI/indoor|outdoor", "AI/été", "AI/" + "x" * 80]
    for path in (out / "day" / "sea.jpg.xmp", copies / "day" / "sea.jpg"):
        got = exiftool_tags(path)
        assert as_list(got["XMP-digiKam:TagsList"]) == tree, path
        assert as_list(got["XMP-lr:HierarchicalSubject"]) == [
            "AI|sea",
            "AI|indoor/outdoor",
            "AI|été",
            "AI|" + "x" * 80,
        ]
        assert as_list(got["XMP-dc:Subject"]) == tags
        assert got["XMP-dc:Description"] == "Blue <sea>"
    copy = exiftool_tags(copies / "day" / "sea.jpg")
    # IPTC keywords hold 64 bytes each (IIM 2:25): the long one is cut there
    assert as_list(copy["IPTC:Keywords"]) == ["sea", "indoor/outdoor", "été", "x" * 64]
    assert copy["IPTC:Caption-Abstract"] == "Blue <sea>"
    assert copy["IPTC:CodedCharacterSet"] == "UTF8"
    assert copy["Photoshop:IPTCDigest"] == copy["File:CurrentIPTCDigest"]  # the IPTC and the XMP agree
    assert copy["IFD0:Orientation"] == "Rotate 90 CW"  # the EXIF stays
    assert "ExifTool:Warning" not in copy, copy.get("ExifTool:Warning")


def test_jpeg_copy_replaces_an_older_xmp_instead_of_adding_a_second() -> None:
    buf = io.BytesIO()
    Image.new("RGB", (8, 8), (1, 2, 3)).save(buf, format="JPEG")
    once = jpeg_with_xmp(buf.getvalue(), xmp_packet(["old"], None, job_id="1"))
    twice = jpeg_with_xmp(once, xmp_packet(["new"], None, job_id="2"))
    assert twice.count(b"http://ns.adobe.com/xap/1.0/\x00") == 1
    assert b"new" in twice and b"<rdf:li>old</rdf:li>" not in twice
    with Image.open(io.BytesIO(twice)) as img:
        assert img.getpixel((4, 4)) == pytest.approx((1, 2, 3), abs=3)


@pytest.mark.parametrize("data", [b"GIF89a....", b"\xff\xd8\xff\xe0\x00\x40JFIF", b"\xff\xd8"])
def test_jpeg_copy_refuses_what_is_not_a_whole_jpeg_header(data: bytes) -> None:
    with pytest.raises(XmpError) as err:
        jpeg_with_xmp(data, xmp_packet(["t"], None, job_id="j"))
    assert err.value.code == "xmp_error"


def test_packet_too_big_for_one_segment_is_refused() -> None:
    buf = io.BytesIO()
    Image.new("RGB", (8, 8)).save(buf, format="JPEG")
    with pytest.raises(XmpError, match="does not fit"):
        jpeg_with_xmp(buf.getvalue(), xmp_packet(["t" * 70_000], None, job_id="j"))


def test_sidecar_names_for_each_photo_manager(tmp_path: Path) -> None:
    photo = tmp_path / "a" / "IMG_1.JPG"
    assert sidecar_path(photo, out_dir=None, relative_to=None) == tmp_path / "a" / "IMG_1.JPG.xmp"
    assert sidecar_path(photo, out_dir=None, relative_to=None, naming="stem") == tmp_path / "a" / "IMG_1.xmp"
    out = tmp_path / "out"
    assert sidecar_path(photo, out_dir=out, relative_to=tmp_path) == out / "a" / "IMG_1.JPG.xmp"
    outside = Path("/elsewhere/b.jpg")
    assert sidecar_path(outside, out_dir=out, relative_to=tmp_path) == out / "elsewhere" / "b.jpg.xmp"


def test_cli_writes_the_sidecars_of_a_job(tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path / 'cli.db'}"
    photo = _photo(tmp_path / "album" / "p.jpg", (10, 20, 30))
    _, job_id = finished_job(db_url, [({"images": [str(photo)]}, {"tags": ["desert"], "caption": "Dunes"})])
    env = {**os.environ, "VLBATCH_DATABASE_URL": db_url}
    cmd = [sys.executable, "-m", "cli.main", "xmp", job_id, "--out", str(tmp_path / "x")]
    proc = subprocess.run([*cmd, "--relative-to", str(tmp_path / "album")], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "sidecars written 1," in proc.stdout
    assert _read_xmp(tmp_path / "x" / "p.jpg.xmp")["Xmp.dc.description"] == {'lang="x-default"': "Dunes"}
    bad = subprocess.run([*cmd, "--naming", "other"], env=env, capture_output=True, text=True)
    assert bad.returncode == 2 and "--naming is ext or stem" in bad.stderr


def test_a_stored_path_with_dots_never_places_a_sidecar_outside_the_out_folder(tmp_path: Path) -> None:
    out = tmp_path / "x"
    climbing = Path(f"{tmp_path}/album/../../../../etc/cron.d/job.jpg")  # as rows stored before paths were folded
    placed = sidecar_path(climbing, out_dir=out, relative_to=tmp_path / "album")
    assert placed.is_relative_to(out) and ".." not in placed.parts
    with pytest.raises(XmpError):
        sidecar_path(Path("../../../etc/job.jpg"), out_dir=out, relative_to=None)  # a relative path that climbs


def test_xmp_out_writes_nothing_outside_its_folder(db_url: str, tmp_path: Path) -> None:
    photo = _photo(tmp_path / "album" / "p.jpg", (10, 20, 30))
    climbing = f"{tmp_path}/album/../../{tmp_path.name}/album/p.jpg"
    relative = "../" * 12 + f"{str(tmp_path).lstrip('/')}/album/p.jpg"
    items = [({"images": [path]}, {"tags": ["t"]}) for path in (str(photo), climbing, relative)]
    factory, job_id = finished_job(db_url, items)
    with factory() as s:  # type: ignore[operator]
        report = write_job_sidecars(s, job_id=job_id, out_dir=tmp_path / "x", relative_to=tmp_path / "x-nowhere")
    written = sorted(p for p in tmp_path.rglob("*.xmp"))
    assert written and all(p.is_relative_to(tmp_path / "x") for p in written), written
    assert report.written + report.errors == 3


def test_sidecars_beside_photos_stay_inside_the_tenants_roots(db_url: str, tmp_path: Path) -> None:
    mine, theirs = _photo(tmp_path / "a" / "p.jpg", (1, 2, 3)), _photo(tmp_path / "b" / "q.jpg", (4, 5, 6))
    factory, job_id = finished_job(db_url, [({"images": [str(p)]}, {"tags": ["t"]}) for p in (mine, theirs)])
    with factory() as s:  # type: ignore[operator]
        report = write_job_sidecars(s, job_id=job_id, roots=[tmp_path / "a"])
    assert (report.written, report.skipped_outside_roots) == (1, 1)
    assert (tmp_path / "a" / "p.jpg.xmp").exists() and not (tmp_path / "b" / "q.jpg.xmp").exists()

"""Sidecars mark the model's keywords under a configurable root (``AI|tag``, ``AI/tag``) where photo managers can
filter them, leave the tags a person added in vlbatch unmarked, and carry the answer's provenance in vlbatch's
namespace; exiftool reads all of it back. A re-run replaces only vlbatch's sidecars: a person's is never touched."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from PIL import Image
from sqlalchemy import select

from jobs.exports.xmp import write_job_sidecars
from jobs.exports.xmp_packet import Provenance, xmp_packet
from preprocessing.keywords import human_keywords
from tests.support.exiftool import as_list, exiftool_tags
from tests.support.ledger import finished_job
from vlbatch.db.models import Item
from vlbatch.db.tags import edit_tags

LIBRARY = Path(__file__).resolve().parents[2] / "fixtures" / "sidecars"


def _photo(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (32, 24), (200, 120, 30)).save(path, format="JPEG")
    return path


def test_the_mark_and_the_provenance_read_back_with_exiftool(db_url: str, tmp_path: Path) -> None:
    ours, theirs = _photo(tmp_path / "album" / "sunset.jpg"), _photo(tmp_path / "album" / "harbour.jpg")
    person = theirs.with_name("harbour.jpg.xmp")
    shutil.copy(LIBRARY / "digikam" / "harbour.jpg.xmp", person)  # a person's digiKam sidecar
    before = person.read_bytes()
    factory, job_id = finished_job(
        db_url,
        [
            ({"images": [str(ours)]}, {"tags": ["sunset", "sea"], "caption": "Low sun"}),
            ({"images": [str(theirs)]}, {"tags": ["boat"]}),
        ],
    )
    with factory() as s:
        first_item = s.scalars(select(Item.id).where(Item.job_id == job_id).order_by(Item.seq)).first()
        assert first_item is not None
        edit_tags(s, item_id=first_item, add=["Grandma"], remove=[], author="ann", max_edits=50)
        s.commit()
        report = write_job_sidecars(s, job_id=job_id, jpeg_copies=tmp_path / "copies", relative_to=tmp_path)

    assert (report.written, report.kept_foreign, report.jpeg_copies) == (1, 1, 2)
    for path in (ours.with_name("sunset.jpg.xmp"), tmp_path / "copies" / "album" / "sunset.jpg"):
        got = exiftool_tags(path)
        assert as_list(got["XMP-digiKam:TagsList"]) == ["AI/sunset", "AI/sea", "Grandma"], path
        assert as_list(got["XMP-lr:HierarchicalSubject"]) == ["AI|sunset", "AI|sea", "Grandma"]
        assert as_list(got["XMP-dc:Subject"]) == ["sunset", "sea", "Grandma"]
        assert got["XMP-vlbatch:Job"] == job_id and got["XMP-vlbatch:KeywordRoot"] == "AI"
        assert (got["XMP-vlbatch:Model"], str(got["XMP-vlbatch:PipelineVersion"])) == ("m", "1")
        assert got["XMP-vlbatch:OptionsHash"] == "h"
    # The library's own keywords: the person's, never the model's.
    assert human_keywords(ours) == ["Grandma"]
    assert person.read_bytes() == before and human_keywords(theirs) == ["Bergen", "boat", "harbour"]

    # A re-run under another root replaces our sidecar and leaves the person's as it was.
    with factory() as s:
        again = write_job_sidecars(s, job_id=job_id, keyword_root="Machine/vlbatch")
    assert (again.written, again.kept_foreign) == (1, 1)
    got = exiftool_tags(ours.with_name("sunset.jpg.xmp"))
    assert as_list(got["XMP-digiKam:TagsList"]) == ["Machine/vlbatch/sunset", "Machine/vlbatch/sea", "Grandma"]
    assert as_list(got["XMP-lr:HierarchicalSubject"]) == ["Machine|vlbatch|sunset", "Machine|vlbatch|sea", "Grandma"]
    assert person.read_bytes() == before
    assert human_keywords(ours) == ["Grandma"]  # the sidecar names its root: still ours under the default mark


def test_every_part_of_the_provenance_reads_back(tmp_path: Path) -> None:
    made_by = Provenance(
        model="qwen2.5-vl-3b",
        model_revision="5b0a1e0c",
        pipeline_version="3",
        options_hash="9f2c",
        prompt_hash="a1b2c3",
    )
    sidecar = tmp_path / "p.jpg.xmp"
    sidecar.write_bytes(xmp_packet(["sea"], None, job_id="j", provenance=made_by))
    got = exiftool_tags(sidecar)
    assert {
        "model": got["XMP-vlbatch:Model"],
        "model_revision": got["XMP-vlbatch:ModelRevision"],
        "pipeline_version": str(got["XMP-vlbatch:PipelineVersion"]),
        "options_hash": got["XMP-vlbatch:OptionsHash"],
        "prompt_hash": got["XMP-vlbatch:PromptHash"],
    } == vars(made_by)
    bare = tmp_path / "q.jpg.xmp"
    bare.write_bytes(xmp_packet(["sea"], None, job_id="j", provenance=Provenance(model="m")))
    assert "XMP-vlbatch:PromptHash" not in exiftool_tags(bare)  # an unknown part is left out, not written empty


def test_cli_takes_the_keyword_root_and_refuses_an_empty_one(tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path / 'cli.db'}"
    photo = _photo(tmp_path / "album" / "p.jpg")
    _, job_id = finished_job(db_url, [({"images": [str(photo)]}, {"tags": ["desert"]})])
    env = {**os.environ, "VLBATCH_DATABASE_URL": db_url, "VLBATCH_XMP_KEYWORD_ROOT": "Auto"}
    cmd = [sys.executable, "-m", "cli.main", "xmp", job_id, "--out", str(tmp_path / "x")]
    cmd += ["--relative-to", str(tmp_path / "album")]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    sidecar = tmp_path / "x" / "p.jpg.xmp"
    assert as_list(exiftool_tags(sidecar)["XMP-lr:HierarchicalSubject"]) == ["Auto|desert"]  # the setting
    proc = subprocess.run([*cmd, "--keyword-root", "Tags|AI"], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert as_list(exiftool_tags(sidecar)["XMP-digiKam:TagsList"]) == ["Tags/AI/desert"]  # the option over it
    bad = subprocess.run([*cmd, "--keyword-root", " | "], env=env, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--keyword-root needs a name" in bad.stderr

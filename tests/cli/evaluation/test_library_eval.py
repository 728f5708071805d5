"""``vlbatch eval --labels-from xmp`` over a library whose keywords digiKam-style and Lightroom-style sidecars, embedded
XMP and IPTC hold (``tests/fixtures/sidecars``), on the stub engine: the library's keywords are the truth, the
synonyms file maps and drops words, and the report names the tags the model never gives and the photos it disagrees
with most, with thumbnails."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from typer.testing import CliRunner

from cli.evaluation.labels import LabelsError
from cli.evaluation.library import library_labels, read_synonyms
from cli.main import app
from jobs.exports.xmp_packet import xmp_packet
from vlbatch.settings import get_settings

LIBRARY = Path(__file__).resolve().parents[2] / "fixtures" / "sidecars"
# Every photo gets the same answer: two tags the library uses somewhere, one it never does.
STUB = {"backend": "stub", "stub": {"answer": json.dumps({"tags": ["boat", "dog", "sky"]}), "schema_answers": False}}


@pytest.fixture
def library(tmp_path: Path) -> Path:
    folder = tmp_path / "library"
    shutil.copytree(LIBRARY, folder, ignore=shutil.ignore_patterns("README.md"))
    Image.new("RGB", (40, 30), (90, 90, 200)).save(folder / "untagged.jpg")  # no keywords: not scored
    tagged_by_us = folder / "ours.jpg"  # only vlbatch's own keywords: not the library's, not scored
    Image.new("RGB", (40, 30), (9, 90, 20)).save(tagged_by_us)
    tagged_by_us.with_name("ours.jpg.xmp").write_bytes(xmp_packet(["boat"], None, job_id="earlier"))
    return folder


def test_eval_scores_the_model_against_the_librarys_own_keywords(
    library: Path, tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "synonyms.txt").write_text("# the library's word = the model's\nAnna =\nstreet food = food\n")
    monkeypatch.setenv("VLBATCH_LOG_FILE", str(tmp_path / "eval.log"))
    get_settings.cache_clear()
    out = tmp_path / "report"
    args = ["eval", str(library), "--labels-from", "xmp", "--synonyms", str(tmp_path / "synonyms.txt")]
    result = CliRunner().invoke(
        app, [*args, "--model", str(tiny_model), "--engine", json.dumps(STUB), "--out", str(out)]
    )
    get_settings.cache_clear()
    assert result.exit_code == 0, result.output
    report = json.loads((out / "eval.json").read_text())
    (scores,) = report["scores"]
    per_tag = scores["tags_per_tag"]
    assert (per_tag["boat"]["tp"], per_tag["boat"]["fp"]) == (1, 4)  # harbour.jpg's; ours.jpg not scored
    assert (per_tag["dog"]["tp"], per_tag["dog"]["fp"]) == (1, 4)
    assert per_tag["sky"]["fp"] == 5 and "anna" not in per_tag and "food" in per_tag
    assert scores["items"] == 5

    (lib,) = report["library"]
    assert (lib["photos"], lib["unlabelled"], lib["unmapped"]) == (5, 2, 1)
    assert {n["tag"] for n in lib["never_given"]} == {
        "bergen", "harbour", "street", "beach", "été", "market", "fruit", "fès", "café", "food",
    }  # fmt: skip
    worst = [Path(d["path"]).name for d in lib["disagreements"]]
    assert worst == ["market.jpg", "old-iptc.jpg", "bikes.jpg", "harbour.jpg", "dog.jpg"]
    assert lib["disagreements"][0]["missed"] == ["fruit", "fès", "market"]
    assert lib["disagreements"][0]["extra"] == ["boat", "dog", "sky"]

    markdown = (out / "eval.md").read_text()
    assert "Against the library's own keywords" in markdown
    assert "5 photos with keywords scored; 2 without keywords not scored" in markdown
    thumbs = sorted((out / "thumbs").iterdir())
    assert len(thumbs) == 5
    for thumb in thumbs:
        assert f"![](thumbs/{thumb.name})" in markdown
        with Image.open(thumb) as img:
            assert img.format == "JPEG" and max(img.size) <= 160


def test_the_truth_follows_the_hierarchy_option_and_the_mark(library: Path) -> None:
    leaves = {p.name: sorted(e.tags or ()) for e in library_labels(library).labels for p in [e.path]}
    assert leaves["harbour.jpg"] == ["bergen", "boat", "harbour"]
    assert leaves["bikes.jpg"] == ["anna", "street"]  # AI/bicycle is machine-made
    paths = {e.path.name: sorted(e.tags or ()) for e in library_labels(library, hierarchy="path").labels}
    assert paths["dog.jpg"] == ["animals/dog", "beach", "seasons/été"]
    # Under another mark, AI/ is a person's tree like any other.
    other = {e.path.name: sorted(e.tags or ()) for e in library_labels(library, mark="Machine").labels}
    assert other["bikes.jpg"] == ["anna", "bicycle", "street"]


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("s.json", '{"Automobile": "car", "Grandma": null, "auto": ["car", "Vehicle"]}', None),
        ("s.txt", "Automobile = car\nGrandma =\n# comment\n\n", None),
        ("s.txt", "Automobile car\n", "s.txt:1"),
        ("s.json", '["car"]', "one object"),
        ("s.json", '{"a": 3}', "must map"),
    ],
)
def test_synonyms_files(tmp_path: Path, name: str, text: str, expected: str | None) -> None:
    path = tmp_path / name
    path.write_text(text)
    if expected is not None:
        with pytest.raises(LabelsError, match=expected) as err:
            read_synonyms(path)
        assert err.value.code == "bad_labels"
        return
    synonyms: dict[str, Any] = read_synonyms(path)
    assert synonyms["automobile"] == ("car",) and synonyms["grandma"] == ()
    if name.endswith(".json"):
        assert synonyms["auto"] == ("car", "vehicle")


def _said(output: str) -> str:
    """The command's message without the error box's borders and line breaks."""
    return " ".join(output.replace("│", " ").split())


def test_labels_from_xmp_refuses_what_does_not_go_with_it(library: Path, tiny_model: Path, tmp_path: Path) -> None:
    base = ["eval", str(library), "--model", str(tiny_model), "--out", str(tmp_path / "r")]
    labels = tmp_path / "labels.jsonl"
    labels.write_text('{"path": "untagged.jpg", "tags": ["sea"]}\n')
    for extra, message in [
        (["--labels-from", "xmp", "--labels", str(labels)], "no --labels"),
        (["--labels-from", "xmp", "--task", "classify"], "--task tag"),
        (["--labels-from", "exif"], "file or xmp"),
        (["--hierarchy", "path"], "go with --labels-from xmp"),
    ]:
        result = CliRunner().invoke(app, [*base, *extra])
        assert result.exit_code == 2 and message in _said(result.output), (extra, result.output)
    bad = tmp_path / "synonyms.txt"
    bad.write_text("automobile car\n")
    result = CliRunner().invoke(app, [*base, "--labels-from", "xmp", "--synonyms", str(bad)])
    assert isinstance(result.exception, LabelsError) and result.exception.code == "bad_labels"
    assert not (tmp_path / "r" / "eval.json").exists()  # refused before anything ran
    empty = tmp_path / "empty"
    empty.mkdir()
    Image.new("RGB", (8, 8)).save(empty / "a.jpg")
    result = CliRunner().invoke(app, ["eval", str(empty), "--model", str(tiny_model), "--labels-from", "xmp"])
    assert result.exit_code == 2 and "has keywords of its own" in _said(result.output)

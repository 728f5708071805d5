"""The eval metrics and the labels file, on hand-made rows (no engine)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli.evaluation import metrics, report
from cli.evaluation.labels import Expected, LabelsError, read_labels, write_labels
from vlbatch.errors import OUTPUT_TRUNCATED, PARSE_ERROR


def _row(path: Path, status: str = "succeeded", **kw: object) -> dict[str, object]:
    return {"ref": str(path), "status": status, "error_code": None, "prompt_tokens": 10, "completion_tokens": 4, **kw}


def test_tag_scores_micro_and_per_tag(tmp_path: Path) -> None:
    a, b, c = tmp_path / "a.jpg", tmp_path / "b.jpg", tmp_path / "c.jpg"
    labels = [
        Expected(a, tags=frozenset({"sea", "blue"})),
        Expected(b, tags=frozenset({"snow"})),
        Expected(c, tags=frozenset({"sea"})),
    ]
    rows = [
        _row(a, tags=["Sea", "blue", "water"]),  # 2 tp, 1 fp (normalised)
        _row(b, tags=["sea"]),  # 1 fp (sea), 1 fn (snow)
        _row(c, "failed", error_code=OUTPUT_TRUNCATED, tags=None, completion_tokens=0),  # 1 fn
    ]
    s = metrics.score(labels, rows)
    assert s.tags_overall is not None
    assert (s.tags_overall["tp"], s.tags_overall["fp"], s.tags_overall["fn"]) == (2, 2, 2)
    assert s.tags_overall["precision"] == pytest.approx(0.5) and s.tags_overall["f1"] == pytest.approx(0.5)
    assert s.tags_per_tag["sea"]["tp"] == 1 and s.tags_per_tag["sea"]["fp"] == 1 and s.tags_per_tag["sea"]["fn"] == 1
    assert s.tags_per_tag["snow"]["recall"] == 0.0
    assert s.tags_per_tag["blue"]["f1"] == 1.0
    assert s.parse_rate == pytest.approx(2 / 3) and s.truncation_rate == pytest.approx(1 / 3)
    assert s.completion_tokens_per_item == pytest.approx(8 / 3)
    assert s.items_exact == 0.0
    # macro F1 over the expected tags: sea 0.5, blue 1, snow 0
    assert s.tags_macro_f1 == pytest.approx(0.5)


def test_tagging_rows_score_tags_not_the_label(tmp_path: Path) -> None:
    labels = [Expected(tmp_path / "x.jpg", tags=frozenset({"sea"}), label="sea")]
    s = metrics.score(labels, [_row(tmp_path / "x.jpg", tags=["sea"], caption="a sea")])
    assert s.label_accuracy is None and s.confusion == {} and s.items_exact == 1.0


def test_missing_rows_are_reported_not_scored(tmp_path: Path) -> None:
    labels = [Expected(tmp_path / "x.jpg", tags=frozenset({"a"})), Expected(tmp_path / "y.jpg", tags=frozenset({"b"}))]
    s = metrics.score(labels, [_row(tmp_path / "x.jpg", tags=["a"])])
    assert s.answered == 1 and s.missing == [str(tmp_path / "y.jpg")]
    assert s.f1 == 1.0


def test_classify_accuracy_and_confusion(tmp_path: Path) -> None:
    p = [tmp_path / f"{i}.pdf" for i in range(4)]
    labels = [
        Expected(p[0], label="invoice"),
        Expected(p[1], label="invoice"),
        Expected(p[2], label="letter"),
        Expected(p[3], label="letter"),
    ]
    rows = [
        _row(p[0], output={"label": "invoice"}),
        _row(p[1], output={"label": "letter"}),
        _row(p[2], output={"label": "letter"}),
        _row(p[3], "failed", error_code=PARSE_ERROR, output=None),
    ]
    s = metrics.score(labels, rows)
    assert s.label_accuracy == 0.5
    assert s.confusion == {"invoice": {"invoice": 1, "letter": 1}, "letter": {"letter": 1, "(failed)": 1}}
    assert s.parse_rate == 0.75 and s.truncation_rate == 0.0
    md = report.markdown(["run"], [s], None, [])
    assert "| invoice | " in md and "label accuracy: 50.0%" in md


def test_extraction_exact_match_per_field(tmp_path: Path) -> None:
    p1, p2 = tmp_path / "1.pdf", tmp_path / "2.pdf"
    labels = [
        Expected(p1, fields={"total": 12.5, "vendor": "ACME  GmbH"}),
        Expected(p2, fields={"total": 3, "vendor": "Foo"}),
    ]
    rows = [
        _row(p1, output={"data": {"total": 12.5, "vendor": "acme gmbh"}}),
        _row(p2, output={"data": {"total": 3.0, "vendor": "Bar"}}),
    ]
    s = metrics.score(labels, rows)
    assert s.fields_exact == {"total": 1.0, "vendor": 0.5}
    assert s.fields_exact_overall == 0.75 and s.items_exact == 0.5


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ("x", " X ", True),
        (1, 1.0, True),
        (True, 1, False),
        ([1, "a"], [1, "A"], True),
        ({"k": 1}, {"k": 2}, False),
        (None, None, True),
        ("1", 1, False),
    ],
)
def test_same_value(a: object, b: object, same: bool) -> None:
    assert metrics.same_value(a, b) is same


def test_compare_agreement_and_gate(tmp_path: Path) -> None:
    paths = [tmp_path / f"{i}.jpg" for i in range(4)]
    labels = [Expected(p, tags=frozenset({"sea"})) for p in paths]
    rows_a = [_row(p, tags=["sea", "blue"]) for p in paths]
    rows_b = [
        _row(paths[0], tags=["blue", "sea"]),  # same set, other order: agrees
        _row(paths[1], tags=["sea"]),
        _row(paths[2], "failed", error_code=PARSE_ERROR, tags=None),
    ]  # paths[3] missing on B
    cmp = metrics.compare(labels, rows_a, rows_b)
    assert cmp.agreement == 0.25
    assert [Path(d["path"]).name for d in cmp.differing] == ["1.jpg", "2.jpg", "3.jpg"]
    scores = [metrics.score(labels, rows_a), metrics.score(labels, rows_b)]
    assert metrics.gate(scores, cmp, min_f1=None, min_agreement=0.2) == []
    failures = metrics.gate(scores, cmp, min_f1=0.7, min_agreement=0.5)  # both F1 are 2/3
    assert len(failures) == 3 and "agreement 0.250" in failures[-1] and "(B)" in failures[1]
    md = report.markdown(["A", "B"], scores, cmp, failures)
    assert "1 of 4 items agree" in md and md.rstrip().endswith(failures[-1])


def test_labels_jsonl_and_csv(tmp_path: Path) -> None:
    (tmp_path / "labels.csv").write_text(
        'path,tags,label,fields\na.jpg,Sea;blue|Water,,\nb.pdf,,invoice,"{""total"": 3}"\n'
    )
    recs = read_labels(tmp_path / "labels.csv")
    assert recs[0].path == (tmp_path / "a.jpg").resolve() and recs[0].tags == {"sea", "blue", "water"}
    assert recs[1].tags is None and recs[1].label == "invoice" and recs[1].fields == {"total": 3}
    write_labels(tmp_path / "labels.jsonl", recs)
    assert read_labels(tmp_path / "labels.jsonl") == recs
    assert json.loads((tmp_path / "labels.jsonl").read_text().splitlines()[0])["path"] == "a.jpg"


@pytest.mark.parametrize(
    "content",
    ['{"tags": ["x"]}\n', "not json\n", '{"path": "a.jpg", "tags": 3}\n', '{"path": "a.jpg"}\n{"path": "a.jpg"}\n', ""],
)
def test_bad_labels_are_refused_with_the_line(tmp_path: Path, content: str) -> None:
    f = tmp_path / "labels.jsonl"
    f.write_text(content)
    with pytest.raises(LabelsError) as err:
        read_labels(f)
    assert err.value.code == "bad_labels" and "labels.jsonl" in str(err.value)

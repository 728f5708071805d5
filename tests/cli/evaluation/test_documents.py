"""Document scoring (page provenance, summary coverage) on hand-made rows, and the planted document set
read back through the product's own document reader (no engine)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cli.evaluation import metrics, report
from cli.evaluation.docset import FIELDS, SCHEMA, planted_document, write_document_set
from cli.evaluation.labels import Expected, LabelsError, read_labels, write_labels
from preprocessing.documents import load_document
from vlbatch.errors import PARSE_ERROR


def _row(path: Path, status: str = "succeeded", **kw: object) -> dict[str, object]:
    return {"ref": str(path), "status": status, "error_code": None, "prompt_tokens": 10, "completion_tokens": 4, **kw}


def _extraction(data: dict[str, Any], pages: dict[str, list[list[int]]]) -> dict[str, Any]:
    """An extract output: each field's candidates in order (the first is the answer), with their pages."""
    provenance = {
        name: [{"value": v, "pages": p, "chunks": [0]} for v, p in zip(values, pages.get(name, []), strict=False)]
        for name, values in ((n, v if isinstance(v, list) else [v]) for n, v in data.items())
        if data[name] is not None
    }
    return {"data": data, "provenance": provenance, "missing": [], "conflicts": []}


def test_page_provenance_right_wrong_wide_and_missing(tmp_path: Path) -> None:
    a, b, c = tmp_path / "a.pdf", tmp_path / "b.pdf", tmp_path / "c.pdf"
    labels = [
        Expected(a, fields={"ref": "X-1", "total": 5}, pages={"ref": (2,), "total": (3,)}),
        Expected(b, fields={"ref": "X-2", "total": 7}, pages={"ref": (1,), "total": (4,)}),
        Expected(c, fields={"ref": "X-3", "total": 9}, pages={"ref": (1,), "total": (1,)}),
    ]
    rows = [
        # ref cites exactly page 2; total came from a chunk spanning pages 3-4: the planted page, not only it.
        _row(a, output=_extraction({"ref": "X-1", "total": 5}, {"ref": [[2]], "total": [[3, 4]]})),
        # ref cites the wrong page; total is not answered (null), so it cites nothing.
        _row(b, output=_extraction({"ref": "X-2", "total": None}, {"ref": [[5]]})),
        _row(c, "failed", error_code=PARSE_ERROR, output=None),
    ]
    s = metrics.score(labels, rows, task="extract")
    assert s.pages_hit == {"ref": pytest.approx(1 / 3), "total": pytest.approx(1 / 3)}
    assert s.pages_exact == {"ref": pytest.approx(1 / 3), "total": 0.0}
    assert s.pages_hit_overall == pytest.approx(2 / 6) and s.pages_exact_overall == pytest.approx(1 / 6)
    assert s.pages_cited_per_answer == pytest.approx((1 + 2 + 1) / 3)
    assert s.fields_exact == {"ref": pytest.approx(2 / 3), "total": pytest.approx(1 / 3)}
    md = report.markdown(["run"], [s], None, [])
    assert "- page provenance: cites the planted page 33.3%, only the planted page 16.7%" in md
    assert "| total | 33.3% | 0.0% |" in md


def test_cited_pages_follow_the_answered_value_not_the_first_candidate() -> None:
    out = _extraction({"ref": "B"}, {})
    out["provenance"]["ref"] = [
        {"value": "A", "pages": [1], "chunks": [0]},
        {"value": "b", "pages": [6], "chunks": [3]},
    ]
    assert metrics.cited_pages({"status": "succeeded", "output": out}, "ref") == (6,)
    listed = _extraction({"names": ["P", "Q"]}, {"names": [[2], [5, 4]]})
    assert metrics.cited_pages({"status": "succeeded", "output": listed}, "names") == (2, 4, 5)
    assert metrics.cited_pages({"status": "succeeded", "output": listed}, "absent") == ()


@pytest.mark.parametrize(
    ("summary", "spellings", "found"),
    [
        ("Invoice INV-84118 from Lakeside.", ["inv-84118"], True),
        ("Invoice INV 84118 from Lakeside.", ["INV-84118"], True),  # punctuation is a word break
        ("A total of EUR 78387.46 is due.", ["78,387.46"], True),  # digit groups joined
        ("A total of EUR 78 387,46 is due.", ["78,387.46"], True),  # space-grouped, decimal comma: same digits
        ("A total of EUR 78.387,46 is due.", ["78,387.46"], False),  # dot-grouped: give that spelling too
        ("Due 9 June 2025.", ["2025-06-09", "9 June 2025"], True),  # any spelling counts
        ("Contact: Mateo Silvan.", ["Mateo Silva"], False),  # whole words only
        ("INV-841180 is another one.", ["INV-84118"], False),
        ("", ["x"], False),
    ],
)
def test_mentions(summary: str, spellings: list[str], found: bool) -> None:
    assert metrics.mentions(summary, spellings) is found


def test_summary_coverage_partial_and_failed(tmp_path: Path) -> None:
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    facts = {"buyer": ("Northwind Traders",), "due": ("2025-03-14", "14 March 2025"), "total": ("1,250.00",)}
    labels = [Expected(a, label="invoice", facts=facts), Expected(b, label="invoice", facts=facts)]
    rows = [
        _row(a, output={"summary": "Northwind traders owes EUR 1250.00.", "pages": [1, 2]}),  # 2 of 3
        _row(b, "failed", error_code=PARSE_ERROR, output=None),  # 0 of 3
    ]
    s = metrics.score(labels, rows, task="summarize")
    assert s.summary_coverage == pytest.approx(2 / 6)
    assert s.summary_per_fact == {"buyer": 0.5, "due": 0.0, "total": 0.5}
    assert s.summaries_complete == 0.0 and s.items_exact == 0.0
    assert s.label_accuracy is None and s.f1 == pytest.approx(2 / 6)  # the summary is not scored as a class
    md = report.markdown(["run"], [s], None, [])
    assert "- summary coverage: 33.3% of planted facts mentioned; 0.0% of summaries mention all" in md
    assert "| due | 0.0% |" in md
    assert metrics.gate([s], None, min_f1=0.5, min_agreement=None) == ["F1 0.333 is below --min-f1 0.5"]


def test_each_task_scores_only_what_its_answers_hold(tmp_path: Path) -> None:
    p = tmp_path / "a.pdf"
    e = Expected(p, label="invoice", fields={"ref": "X"}, pages={"ref": (1,)}, facts={"ref": ("X",)})
    row = _row(p, output=_extraction({"ref": "X"}, {"ref": [[1]]}))
    s = metrics.score([e], [row], task="extract")
    assert s.fields_exact_overall == 1.0 and s.pages_exact_overall == 1.0
    assert s.label_accuracy is None and s.summary_coverage is None and s.items_exact == 1.0
    untasked = metrics.score([e], [row])  # without a task every label is scored, as before
    assert untasked.label_accuracy == 0.0 and untasked.summary_coverage == 0.0


def test_summaries_agree_on_the_facts_they_mention(tmp_path: Path) -> None:
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    facts = {"buyer": ("Northwind Traders",), "total": ("1,250.00",)}
    labels = [Expected(a, facts=facts), Expected(b, facts=facts)]
    rows_a = [
        _row(a, output={"summary": "Northwind Traders must pay 1,250.00 EUR."}),
        _row(b, output={"summary": "Northwind Traders is the buyer."}),
    ]
    rows_b = [
        _row(a, output={"summary": "EUR 1250.00 is owed by Northwind Traders."}),  # other words, same facts
        _row(b, output={"summary": "A total of 1,250.00 is due."}),  # another fact
    ]
    cmp = metrics.compare(labels, rows_a, rows_b)
    assert cmp.agreement == 0.5
    assert cmp.differing == [{"path": str(b), "a": {"facts_mentioned": ["buyer"]}, "b": {"facts_mentioned": ["total"]}}]


def test_labels_with_pages_and_facts_round_trip(tmp_path: Path) -> None:
    (tmp_path / "labels.csv").write_text(
        'path,fields,pages,facts\na.pdf,"{""ref"": ""X""}","{""ref"": 2, ""total"": [3, 1]}",'
        '"{""ref"": ""X"", ""due"": [""2025-01-02"", ""2 January 2025""]}"\n'
    )
    (rec,) = read_labels(tmp_path / "labels.csv")
    assert rec.pages == {"ref": (2,), "total": (1, 3)}
    assert rec.facts == {"ref": ("X",), "due": ("2025-01-02", "2 January 2025")}
    write_labels(tmp_path / "labels.jsonl", [rec])
    assert read_labels(tmp_path / "labels.jsonl") == [rec]


@pytest.mark.parametrize(
    "record",
    [
        {"path": "a.pdf", "pages": {"ref": 0}},
        {"path": "a.pdf", "pages": {"ref": "2"}},
        {"path": "a.pdf", "pages": {"ref": []}},
        {"path": "a.pdf", "pages": [2]},
        {"path": "a.pdf", "facts": {"ref": ""}},
        {"path": "a.pdf", "facts": {"ref": [None]}},
    ],
)
def test_bad_pages_or_facts_are_refused(tmp_path: Path, record: dict[str, Any]) -> None:
    f = tmp_path / "labels.jsonl"
    f.write_text(json.dumps(record) + "\n")
    with pytest.raises(LabelsError) as err:
        read_labels(f)
    assert err.value.code == "bad_labels" and "labels.jsonl:1" in str(err.value)


def test_generated_documents_hold_each_fact_on_its_planted_page_only(tmp_path: Path) -> None:
    labels = write_document_set(tmp_path / "set", count=6, seed=3, min_pages=2, max_pages=5)
    records = read_labels(labels)
    assert [r.path.suffix for r in records] == [".pdf", ".docx", ".txt"] * 2
    assert json.loads((tmp_path / "set" / "schema.json").read_text()) == SCHEMA
    for rec in records:
        doc = load_document(rec.path)
        pages = {p.number: metrics.match_text(p.text) for p in doc.pages}
        assert 2 <= doc.page_count <= 5 and set(rec.pages) == set(FIELDS)
        assert set(rec.facts) == {*FIELDS, *(f"contact_page_{n}" for n in pages)}
        for name, spellings in rec.facts.items():
            on = [n for n, text in pages.items() if metrics.mentions(text, spellings)]
            planted = rec.pages.get(name) or (int(name.rsplit("_", 1)[1]),)
            assert on == list(planted), (rec.path.name, name, on, planted)
        for name, value in rec.fields.items():  # the value printed is the value labelled
            shown = f"{value:,.2f}" if isinstance(value, float) else value
            assert metrics.mentions(doc.pages[rec.pages[name][0] - 1].text, [shown])


def test_the_same_seed_writes_the_same_set(tmp_path: Path) -> None:
    first = write_document_set(tmp_path / "a", count=3, seed=7).read_text()
    again = write_document_set(tmp_path / "b", count=3, seed=7).read_text()
    other = write_document_set(tmp_path / "c", count=3, seed=8).read_text()
    assert first == again and first != other
    assert (tmp_path / "a" / "000_invoice.pdf").read_bytes() == (tmp_path / "b" / "000_invoice.pdf").read_bytes()
    assert planted_document(4, seed=7) == planted_document(4, seed=7)

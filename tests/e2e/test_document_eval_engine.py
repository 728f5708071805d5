"""`vlbatch make-eval-docs` then `vlbatch eval` (extract, summarize) on the real CPU engine, the commands run in this
process on the run's shared engine: the document report is written end to end. The random-weight model scores near
zero; this checks the report's shape and counts, not its quality.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli.evaluation.docset import FIELDS, SCHEMA
from cli.evaluation.labels import read_labels
from engine.runtime.runner import EngineRunner
from tests.support.engine import TEST_ENGINE
from tests.support.shared_engine import vlbatch_cli

pytestmark = [pytest.mark.engine("shared"), pytest.mark.timeout(1200)]

# At TEST_ENGINE's context (2048) each document of 2 to 3 pages is 2 to 3 chunks for extraction (its prompt and
# bounded answer take much of the context), so extraction cites pages from more than one chunk.
DOCS = 3


def test_eval_scores_a_generated_document_set_on_the_engine(
    tmp_path: Path, tiny_model: Path, shared_engine: EngineRunner
) -> None:
    folder = tmp_path / "docs"
    made = vlbatch_cli(["make-eval-docs", str(folder), "--count", str(DOCS), "--min-pages", "2", "--max-pages", "3"])
    assert made.exit_code == 0, made.output[-4000:]
    labels = read_labels(folder / "labels.jsonl")
    assert len(labels) == DOCS and f"--schema {folder / 'schema.json'}" in made.stdout

    # A random-weight model never ends a JSON number (the grammar bounds no digits), so every answer would be
    # cut off; with the total as a bounded string each answer parses and its cited pages are read from it.
    schema = {**SCHEMA, "properties": {**SCHEMA["properties"], "total_amount": {"type": "string", "maxLength": 12}}}
    (tmp_path / "schema.json").write_text(json.dumps(schema))
    runs = {
        "extract": ["--schema", str(tmp_path / "schema.json"), "--options", json.dumps({"overlap_tokens": 16})],
        "summarize": ["--options", json.dumps({"max_summary_chars": 100, "overlap_tokens": 16})],
    }
    reports = {}
    rows = {}
    for task, extra in runs.items():
        out = tmp_path / f"eval-{task}"
        # --engine: the shared engine's own arguments (a lent engine keeps its arguments whatever a run asks).
        args = ["eval", str(folder), "--model", str(tiny_model), "--task", task, "--engine", json.dumps(TEST_ENGINE)]
        proc = vlbatch_cli([*args, "--out", str(out), *extra])
        assert proc.exit_code == 0, proc.output[-4000:]
        assert f"report: {out / 'eval.md'}, {out / 'eval.json'}" in proc.stdout
        reports[task] = (json.loads((out / "eval.json").read_text()), (out / "eval.md").read_text())
        rows[task] = {Path(r["ref"]).name: r for r in map(json.loads, (out / "run.jsonl").read_text().splitlines())}
        assert sorted(rows[task]) == sorted(e.path.name for e in labels)

    doc, md = reports["extract"]
    (s,) = doc["scores"]
    assert doc["task"] == "extract" and doc["passed"] is True
    assert s["items"] == s["answered"] == DOCS and s["missing"] == [] and s["parse_rate"] == 1.0
    for e in labels:  # each document was several chunks; every value cites pages of its own document
        out = rows["extract"][e.path.name]["output"]
        assert out["document"]["chunks"] > 1
        cited = {p for entries in out["provenance"].values() for entry in entries for p in entry["pages"]}
        assert cited <= set(range(1, out["document"]["pages"] + 1))
    assert set(s["fields_exact"]) == set(s["pages_hit"]) == set(s["pages_exact"]) == set(FIELDS)
    assert all(0.0 <= v <= 1.0 for v in [*s["pages_hit"].values(), *s["pages_exact"].values()])
    assert s["label_accuracy"] is None and s["summary_coverage"] is None  # not what an extraction answers
    assert s["prompt_tokens_per_item"] > 0
    assert "- page provenance: cites the planted page" in md and "| field | cites planted page |" in md

    doc, md = reports["summarize"]
    (s,) = doc["scores"]
    assert doc["task"] == "summarize" and s["items"] == s["answered"] == DOCS
    expected_facts = {name for e in labels for name in e.facts}
    assert set(s["summary_per_fact"]) == expected_facts and {*FIELDS, "contact_page_1"} <= expected_facts
    assert 0.0 <= s["summary_coverage"] <= 1.0 and s["fields_exact"] == {} and s["pages_hit"] == {}
    assert "- summary coverage: " in md and "| fact | mentioned |" in md

"""Tests for pipelines.classify: options, schema bound, parsing, and the per-document merge."""

from __future__ import annotations

import json
import random

import pytest
from pydantic import ValidationError

from pipelines import classify
from pipelines.classify import ClassifyOptions, merge_labels
from pipelines.documents_common import ParseError, PassageResult
from preprocessing.chunking import Passage

LABELS = ["contract", "invoice", "manual", "report"]


def test_labels_are_cleaned_and_checked() -> None:
    opts = ClassifyOptions(labels=[" contract ", "invoice", "contract", "service  manual"])
    assert opts.labels == ["contract", "invoice", "service manual"]
    with pytest.raises(ValidationError):
        ClassifyOptions(labels=["  ", ""])
    with pytest.raises(ValidationError):
        ClassifyOptions(labels=[])
    with pytest.raises(ValidationError, match="not in 'labels'"):
        ClassifyOptions(labels=LABELS, descriptions={"memo": "internal note"})
    with pytest.raises(ValidationError):
        ClassifyOptions.model_validate({"labels": LABELS, "merge": "average"})


def test_schema_enum_and_output_bound() -> None:
    opts = ClassifyOptions(labels=[*LABELS, "Übereinkunft über Lieferbedingungen"])
    schema = classify.output_schema(opts)
    assert schema["properties"]["label"]["enum"] == opts.labels
    worst = json.dumps({"label": opts.labels[-1], "confidence": -1.2345678901234567e-300}, ensure_ascii=False)
    assert len(worst.encode()) <= classify.max_output_tokens(opts)
    assert classify.max_output_tokens(ClassifyOptions(labels=["a", "b"])) < classify.max_output_tokens(opts)


def test_prompt_lists_labels_with_descriptions_before_the_text() -> None:
    opts = ClassifyOptions(labels=LABELS, descriptions={"manual": "operating instructions"})
    prompt = classify.map_prompt(Passage(0, "Press the red button to start.", 7, (1,)), opts)
    assert "- manual: operating instructions" in prompt and "- invoice" in prompt
    assert prompt.index("- report") < prompt.index("Press the red button")


def test_parse_answer() -> None:
    opts = ClassifyOptions(labels=LABELS)
    assert classify.parse_answer('{"label": "Invoice", "confidence": 0.8}', opts) == {
        "label": "invoice",
        "confidence": 0.8,
    }
    assert classify.parse_answer('{"label": "report", "confidence": 7}', opts)["confidence"] == 1.0
    for bad in ('{"label": "memo", "confidence": 0.5}', '{"label": 1}', '{"label": "report", "confidence": "hi"}'):
        with pytest.raises(ParseError) as exc:
            classify.parse_answer(bad, opts)
        assert exc.value.code == "parse_error"
    with pytest.raises(ParseError) as exc:
        classify.parse_answer('{"label": "rep', opts, finish_reason="length")
    assert exc.value.code == "output_truncated"


def _r(index: int, pages: tuple[int, ...], label: str, conf: float) -> PassageResult:
    return PassageResult(index, pages, {"label": label, "confidence": conf})


def test_majority_wins_with_its_pages() -> None:
    results = [
        _r(0, (1, 2), "contract", 0.9),
        _r(1, (2, 3), "invoice", 0.99),
        _r(2, (4,), "contract", 0.6),
        _r(3, (5, 6), "report", 0.7),
    ]
    merged = merge_labels(results, ClassifyOptions(labels=LABELS))
    assert merged["label"] == "contract" and merged["chunks"] == [0, 2] and merged["pages"] == [1, 2, 4]
    assert merged["votes"] == {"contract": 2, "invoice": 1, "report": 1}
    assert merged["agreement"] == 0.5 and merged["confidence"] == pytest.approx(0.75)
    shuffled = results[:]
    random.Random(2).shuffle(shuffled)
    assert merge_labels(shuffled, ClassifyOptions(labels=LABELS)) == merged


def test_majority_ties_break_on_confidence_then_order() -> None:
    tie = [_r(0, (1,), "manual", 0.5), _r(1, (2,), "report", 0.9)]
    assert merge_labels(tie, ClassifyOptions(labels=LABELS))["label"] == "report"
    even = [_r(0, (1,), "manual", 0.5), _r(1, (2,), "report", 0.5)]
    assert merge_labels(even, ClassifyOptions(labels=LABELS))["label"] == "manual"


def test_max_confidence() -> None:
    opts = ClassifyOptions(labels=LABELS, merge="max_confidence")
    results = [_r(0, (1,), "contract", 0.6), _r(1, (2,), "contract", 0.7), _r(2, (3,), "invoice", 0.95)]
    merged = merge_labels(results, opts)
    assert merged["label"] == "invoice" and merged["confidence"] == 0.95 and merged["pages"] == [3]
    with pytest.raises(ValueError, match="at least one"):
        merge_labels([], opts)


def test_select_chunks_takes_the_first_n() -> None:
    chunks = [Passage(i, f"text {i}", 2, (i + 1,)) for i in range(5)]
    assert classify.select_chunks(chunks, ClassifyOptions(labels=LABELS, max_chunks=2)) == chunks[:2]
    assert classify.select_chunks(chunks, ClassifyOptions(labels=LABELS)) == chunks

"""Tests for pipelines.extract: schema validation, the bounded engine schema, parsing and the merge."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from pipelines import extract
from pipelines.documents_common import ParseError, PassageResult, is_plain_string
from pipelines.extract import ExtractOptions, SchemaError, merge_answers, validate_user_schema
from preprocessing.chunking import Passage, load_token_counter

CONTRACT = {
    "type": "object",
    "properties": {
        "parties": {"type": "array", "items": {"type": "string"}},
        "effective_date": {"type": "string", "description": "ISO date"},
        "total_amount": {"type": "number"},
        "currency": {"type": "string", "enum": ["EUR", "USD", "GBP"]},
        "auto_renews": {"type": "boolean"},
        "obligations": {
            "type": "array",
            "maxItems": 5,
            "items": {
                "type": "object",
                "properties": {"party": {"type": "string", "maxLength": 40}, "duty": {"type": "string"}},
                "required": ["duty"],
            },
        },
        "notes": {"type": ["string", "null"], "maxLength": 5000},
        "contract_id": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]+$", "maxLength": 20},
        "signed_on": {"type": "string", "format": "date"},
    },
    "required": ["parties", "effective_date"],
}


@pytest.mark.parametrize(
    ("schema", "fragment"),
    [
        ([], "JSON object"),
        ({"type": "array", "items": {"type": "string"}}, '"object"'),
        ({"type": "object"}, "non-empty 'properties'"),
        ({"type": "object", "properties": {}}, "non-empty 'properties'"),
        ({"type": "object", "properties": {"a": {"type": "strng"}}}, "strng"),
        ({"type": "object", "properties": {"a": {"$ref": "#/$defs/x"}}}, "$ref"),
        ({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["b"]}, "required"),
        ({"type": "object", "properties": {"a": {"description": "anything"}}}, "give a 'type'"),
        ({"type": "object", "properties": {"a": {"type": "object"}}}, "needs 'properties'"),
        ({"type": "object", "properties": {"a": {"type": "string", "enum": []}}}, "enum"),
        ({"type": "object", "properties": {"a": {"allOf": [{"type": "string"}]}}}, "allOf"),
    ],
)
def test_invalid_schemas_are_refused(schema: Any, fragment: str) -> None:
    with pytest.raises(SchemaError) as exc:
        validate_user_schema(schema)
    assert fragment in str(exc.value) and exc.value.code == "invalid_schema"
    # Through the options model the same mistake is a pydantic ValidationError (HTTP 422 in the API).
    with pytest.raises(ValidationError):
        ExtractOptions.model_validate({"json_schema": schema})


def test_schema_size_and_depth_limits() -> None:
    wide = {"type": "object", "properties": {f"f{i}": {"type": "string"} for i in range(extract.MAX_PROPERTIES + 1)}}
    with pytest.raises(SchemaError, match="limit"):
        validate_user_schema(wide)
    deep: dict[str, Any] = {"type": "string"}
    for _ in range(extract.MAX_DEPTH + 1):
        deep = {"type": "object", "properties": {"x": deep}}
    with pytest.raises(SchemaError, match="nested deeper"):
        validate_user_schema(deep)


def _maximal(node: dict[str, Any]) -> Any:
    """The largest answer the bounded schema allows (longest strings, fullest arrays, widest branch)."""
    if "anyOf" in node:
        return max((_maximal(a) for a in node["anyOf"]), key=lambda v: len(json.dumps(v)))
    if "enum" in node:
        return max(node["enum"], key=lambda v: len(json.dumps(v)))
    kind = node["type"]
    if kind == "string" and "pattern" in node and not is_plain_string(node):
        return "AB-" + "1" * (node["maxLength"] - 3)  # the longest CONTRACT's contract_id pattern allows
    if kind == "string":
        return "\U0001f600" * node["maxLength"]  # 4 UTF-8 bytes each: the most a plain character costs
    if kind == "array":
        return [_maximal(node["items"])] * node["maxItems"]
    if kind == "object":
        return {k: _maximal(v) for k, v in node["properties"].items()}
    return {"number": -1.2345678901234567e-300, "integer": -(2**63), "boolean": False, "null": None}[kind]


def test_output_schema_is_bounded_and_max_tokens_covers_the_largest_answer(tiny_model: Path) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    count = load_token_counter(tiny_model)
    opts = ExtractOptions(json_schema=CONTRACT, max_string_chars=120, max_array_items=7)
    schema = extract.output_schema(opts)
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["required"] == list(CONTRACT["properties"]) and schema["additionalProperties"] is False
    biggest = _maximal(schema)
    jsonschema.validate(biggest, schema)
    assert len(biggest["parties"]) == 7 and len(biggest["obligations"]) == 5  # the user's tighter bound wins
    assert len(biggest["obligations"][0]["party"]) == 40 and len(biggest["notes"]) == 120
    assert "format" not in json.dumps(schema) and schema["properties"]["contract_id"]["anyOf"][0]["pattern"]
    notes = schema["properties"]["notes"]["anyOf"]
    assert {"type": "null"} in notes and all("maxLength" not in b for b in notes if b["type"] == "null")
    as_bytes = json.dumps(biggest, ensure_ascii=False).encode()
    assert count(as_bytes.decode()) <= len(as_bytes) <= extract.max_output_tokens(opts)
    # Under the requester's own pattern escapes may appear: 12 tokens per character are budgeted.
    plain = json.dumps({**biggest, "contract_id": "A" * 20}, ensure_ascii=False)
    escaped = plain.replace('"' + "A" * 20 + '"', '"' + "\\u0041" * 20 + '"')  # what the model may emit
    assert json.loads(escaped)["contract_id"] == "A" * 20
    assert len(escaped.encode()) <= extract.max_output_tokens(opts)
    # Every top-level field may be null (a chunk may not mention it); an optional nested field too.
    nulls = dict.fromkeys(CONTRACT["properties"])
    jsonschema.validate(nulls, schema)
    jsonschema.validate({**nulls, "obligations": [{"party": None, "duty": "deliver"}]}, schema)
    for bad in ({**nulls, "effective_date": "x" * 121}, {**nulls, "parties": ["a"] * 8}, {**nulls, "extra": 1}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)
    assert extract.max_output_tokens(ExtractOptions(json_schema=CONTRACT, max_string_chars=20)) < (
        extract.max_output_tokens(opts)
    )


def test_parse_answer_fills_missing_and_checks_types() -> None:
    opts = ExtractOptions(json_schema=CONTRACT)
    out = extract.parse_answer('{"parties": ["Acme"], "total_amount": 12500, "unknown": 1}', opts)
    assert out["parties"] == ["Acme"] and out["total_amount"] == 12500 and out["currency"] is None
    assert set(out) == set(CONTRACT["properties"])
    for bad in ('{"total_amount": "12,500"}', '{"parties": "Acme"}', '{"auto_renews": 1}', "[1]", "nope"):
        with pytest.raises(ParseError) as exc:
            extract.parse_answer(bad, opts)
        assert exc.value.code == "parse_error"
    with pytest.raises(ParseError) as exc:
        extract.parse_answer('{"parties": ["Acme", "Be', opts, finish_reason="length")
    assert exc.value.code == "output_truncated"


def test_map_prompt_carries_fields_and_text() -> None:
    opts = ExtractOptions(json_schema=CONTRACT, instructions="Dates as YYYY-MM-DD")
    prompt = extract.map_prompt(Passage(0, "Signed 3 March 2025 by Acme.", 8, (2,)), opts)
    assert "effective_date" in prompt and "ISO date" in prompt and "YYYY-MM-DD" in prompt
    assert prompt.index("effective_date") < prompt.index("Signed 3 March 2025")


def _results() -> list[PassageResult]:
    blank = dict.fromkeys(CONTRACT["properties"])
    return [
        PassageResult(0, (1, 2), {**blank, "parties": ["Acme GmbH", "Beta Ltd"], "effective_date": None}),
        PassageResult(1, (2, 3), {**blank, "parties": ["beta  LTD", "Gamma AG"], "effective_date": "2025-03-03"}),
        PassageResult(2, (9,), {**blank, "parties": ["Acme GmbH"], "effective_date": "2025-04-01", "total_amount": 5}),
        PassageResult(3, (10,), {**blank, "effective_date": "2025-03-03", "obligations": [{"party": "Acme"}]}),
    ]


def test_merge_unions_lists_and_takes_first_scalar_with_provenance() -> None:
    opts = ExtractOptions(json_schema=CONTRACT)
    merged = merge_answers(_results(), opts)
    data, prov = merged["data"], merged["provenance"]
    assert data["parties"] == ["Acme GmbH", "Beta Ltd", "Gamma AG"]  # first spelling kept, duplicates merged
    assert [e["pages"] for e in prov["parties"]] == [[1, 2, 9], [1, 2, 3], [2, 3]]
    assert [e["chunks"] for e in prov["parties"]] == [[0, 2], [0, 1], [1]]
    assert data["effective_date"] == "2025-03-03"  # first non-null in document order
    assert [(e["value"], e["pages"]) for e in prov["effective_date"]] == [
        ("2025-03-03", [2, 3, 10]),
        ("2025-04-01", [9]),
    ]
    assert data["total_amount"] == 5 and prov["total_amount"][0]["pages"] == [9]
    assert data["currency"] is None and prov["currency"] == []
    assert data["obligations"] == [{"party": "Acme"}]
    assert merged["conflicts"] == ["effective_date"] and merged["missing"] == []
    # Order of arrival does not matter: the worker may finish chunks in any order.
    shuffled = _results()
    random.Random(1).shuffle(shuffled)
    assert merge_answers(shuffled, opts) == merged


def test_merge_reports_missing_required_fields() -> None:
    opts = ExtractOptions(json_schema=CONTRACT)
    blank = dict.fromkeys(CONTRACT["properties"])
    merged = merge_answers([PassageResult(0, (1,), {**blank, "total_amount": 3})], opts)
    assert merged["missing"] == ["parties", "effective_date"]
    assert merged["data"]["parties"] == []


def test_structural_checks_hold_without_jsonschema(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "jsonschema", None)  # as in an install without vLLM's dependencies
    with pytest.raises(SchemaError, match="strng"):
        validate_user_schema({"type": "object", "properties": {"a": {"type": "strng"}}})
    assert validate_user_schema(CONTRACT) is CONTRACT

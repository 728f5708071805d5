"""A result's fields are declared once (``vlbatch.db.result_fields``); what is built from the declaration or written
beside it (the table's typed columns, the record's typed view) agrees with it: the table, the record, the API's
schema, the JSONL line and the flat exports' columns. A field added to the declaration alone fails here only for
its column and its producer."""

from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path
from typing import Any

import vlbatch.db.results
from api.schemas import ResultOut
from jobs.exports.columns import FIXED
from jobs.exports.jsonl import jsonl_lines
from jobs.exports.parquet import parquet_schema
from vlbatch.db.models import Result
from vlbatch.db.outcome_statement import BATCH_FIELDS
from vlbatch.db.outcomes import Marker, Outcome
from vlbatch.db.result_fields import EXPORTED, FLAT, ITEM_FIELDS, READ_FIELDS, RESULT_FIELDS
from vlbatch.db.results import RESULT_COLUMNS, ResultRecord

# Exported fields the CSV and Parquet exports leave out of their fixed columns (the answer's text beside its
# parsed output; Parquet adds raw_text itself), and the columns they add that are not stored (read off the output).
NOT_FLAT = {"raw_text", "reused_from"}
FLAT_ONLY = {"caption"}


def test_the_table_has_the_declared_columns_in_order() -> None:
    assert tuple(c.name for c in Result.__table__.columns) == tuple(f.name for f in RESULT_FIELDS)


def test_a_field_never_none_is_a_not_null_column() -> None:
    for f in RESULT_FIELDS:
        assert f.nullable or not Result.__table__.columns[f.name].nullable, f"{f.name} is nullable in the table"


def test_each_written_field_has_its_producer() -> None:
    outcome = {f.name for f in dataclasses.fields(Outcome)}
    marker = {f.name for f in dataclasses.fields(Marker)}
    for f in RESULT_FIELDS:
        assert f.source != "outcome" or f.name in outcome, f"Outcome has no {f.name}"
        assert f.source != "marker" or f.name in marker, f"Marker has no {f.name}"


def test_the_record_is_the_item_then_the_read_fields() -> None:
    assert ResultRecord._fields == (*ITEM_FIELDS, "has_result", *(f.read for f in READ_FIELDS), "inputs")
    assert len(RESULT_COLUMNS) == len(ResultRecord._fields) - 1  # all but inputs, read only when asked for
    assert {f.name for f in BATCH_FIELDS} == {f.name for f in RESULT_FIELDS} - {"created_at"}


def test_the_records_typed_view_names_its_fields_in_their_order() -> None:
    """The type checker's view of the record (written out for types) lists fields the record has, in its order,
    from its start: a typed reader never reads a field by another's position."""
    tree = ast.parse(Path(vlbatch.db.results.__file__).read_text())
    view = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "_Fields")
    typed = [s.target.id for s in view.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)]
    fields = list(ResultRecord._fields)
    assert typed[-1] == "inputs" and typed[:-1] == fields[: len(typed) - 1]


def test_the_api_schema_has_the_exported_fields_in_order() -> None:
    assert tuple(ResultOut.model_fields) == EXPORTED
    for name in EXPORTED:
        assert hasattr(ResultRecord, name), f"ResultRecord has no {name} for result_out"


def test_a_jsonl_line_has_the_exported_fields_in_order_as_the_api_writes_them() -> None:
    stored: dict[str, Any] = {"integer": 1, "text": "t", "json": "[]"}
    values: dict[str, Any] = {str(f.read): stored[f.sql] for f in READ_FIELDS}
    values["output_text"] = '{"tags": ["a"]}'
    empty: dict[str, Any] = {str(f.read): f.empty for f in READ_FIELDS}
    full = ResultRecord(1, 0, "r", "succeeded", None, None, True, **values)
    none = ResultRecord(2, 1, None, "failed", "x", "y", False, **empty)
    lines = jsonl_lines([full, none]).decode().splitlines()
    for line in lines:
        assert tuple(json.loads(line)) == EXPORTED
    for record, line in zip([full, none], lines, strict=True):
        api = ResultOut.model_validate({name: getattr(record, name) for name in EXPORTED})
        assert line == json.dumps(api.model_dump(mode="json"))


def test_the_flat_exports_have_the_exported_fields() -> None:
    assert set(FIXED) == (set(EXPORTED) - NOT_FLAT) | FLAT_ONLY
    assert FIXED[: len(ITEM_FIELDS)] == ITEM_FIELDS
    assert FIXED[-len(FLAT) :] == tuple(f.name for f in FLAT)
    assert set(parquet_schema().names) == set(FIXED) | {"tag_sources", "raw_text"}

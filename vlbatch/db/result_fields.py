"""A result's fields, declared once: what the outcome writer stores in a ``results`` row and what a reader gets back.

The row writer (``outcomes.result_row``, ``outcomes.batch_rows``), the one-statement write's recordset
(``outcome_statement``), the columns a record is read from (``results.RESULT_COLUMNS``) and the record itself
(``results.record``) are built from ``RESULT_FIELDS``; the API's ``ResultOut`` and every export's columns are
``EXPORTED``: the JSONL line's format, the CSV and Parquet columns (``FLAT``) and the record's fields are built from
it at import, and ``tests/db/test_result_fields.py`` holds each to it.
Adding a field to a result: one ``ResultField`` here, its producer (an ``Outcome`` attribute of the same name, set
where the value is made, or the marker's), and its ``Result`` column with its migration (the table's typed columns
stay written out: queries use them). The record, the API and the JSONL, CSV and Parquet exports then have it; a
reader that reads it by name adds it, typed, to the record's typed view (``results._Fields``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["EXPORTED", "EXPORTED_FIELDS", "FLAT", "ITEM_FIELDS", "READ_FIELDS", "RESULT_FIELDS", "ResultField"]

# Where a written value comes from: the outcome's attribute of the field's name, the marker's, the writer's clock,
# or the model's tags merged with the operator's edits (``vlbatch.db.tags``).
Source = Literal["outcome", "marker", "now", "tags"]


@dataclass(frozen=True)
class ResultField:
    """One column of the ``results`` table, as the writer fills it and a reader reads it.

    ``sql`` is its PostgreSQL type in the one-statement write's recordset (``json`` columns travel as text and are
    cast); ``read`` is the record's field it is read into (None: not read back, as ``created_at``); ``exported`` puts
    it among the API's and the JSONL export's fields, under the record's attribute of the field's name (a property
    decoding the stored text, for ``output`` and ``tags``); ``flat`` among the CSV and Parquet columns too (after
    the item's, the tags, the caption and the output); ``doc`` is its description in the API's schema."""

    name: str
    sql: str
    source: Source
    read: str | None = None
    exported: bool = False
    empty: Any = None  # the record's value for an item without a result
    json_null: bool = False  # a json column that stores None as JSON null (``output``), not as SQL NULL
    flat: bool = True  # an exported field among the flat exports' columns
    nullable: bool = True  # False: never None in a result (the column is NOT NULL); readers skip the check
    doc: str | None = None

    @property
    def json(self) -> bool:
        return self.sql == "json"


# In the table's write order (the recordset's). ``item_id`` and ``job_id`` are the outcome's keys.
RESULT_FIELDS: tuple[ResultField, ...] = (
    ResultField("item_id", "integer", "outcome"),
    ResultField("job_id", "text", "outcome"),
    ResultField("output", "json", "outcome", read="output_text", exported=True, json_null=True),
    ResultField("raw_text", "text", "outcome", read="raw_text", exported=True, flat=False),
    ResultField("prompt_tokens", "integer", "outcome", read="prompt_tokens", exported=True, empty=0),
    ResultField("completion_tokens", "integer", "outcome", read="completion_tokens", exported=True, empty=0),
    ResultField("model", "text", "marker", read="model", exported=True, nullable=False),
    ResultField(
        "model_revision",
        "text",
        "marker",
        read="model_revision",
        exported=True,
        doc="The served model's revision (a short hash of its config and weight index); None when the worker had none.",
    ),
    ResultField("pipeline_version", "text", "marker", read="pipeline_version", exported=True, nullable=False),
    ResultField("options_hash", "text", "marker", read="options_hash", exported=True, nullable=False),
    ResultField("created_at", "timestamptz", "now"),
    ResultField(
        "tags",
        "json",
        "tags",
        read="tags_text",
        exported=True,
        doc="The model's tags merged with those added or removed by hand; None for untagged outputs.",
    ),
    ResultField("content_hash", "text", "outcome"),
    ResultField(
        "reused_from",
        "integer",
        "outcome",
        read="reused_from",
        exported=True,
        flat=False,
        doc="The item whose answer this is, when the item's bytes were answered before with the same model "
        "revision, pipeline version and options (no engine time); None for an answer of its own.",
    ),
    ResultField(
        "prompt_hash",
        "text",
        "outcome",
        read="prompt_hash",
        exported=True,
        doc="sha256 (hex) of the prompt text the engine was given, rendered by the model's chat template; of the "
        "prompts' own hashes, one a line, when the answer took several requests (a clip's segments); the "
        "answering item's, for a reused answer; None for a document or a failure before the engine was asked.",
    ),
)

# The item's own fields a record starts with (``Item``'s columns of the same names, ``item_id`` its id); then
# ``has_result``, then ``READ_FIELDS``.
ITEM_FIELDS = ("item_id", "seq", "ref", "status", "error_code", "error_message")

READ_FIELDS: tuple[ResultField, ...] = tuple(f for f in RESULT_FIELDS if f.read is not None)

# The fields of a result as the API answers it and the JSONL export writes it, in order.
EXPORTED_FIELDS: tuple[ResultField, ...] = tuple(f for f in RESULT_FIELDS if f.exported)
EXPORTED: tuple[str, ...] = (*ITEM_FIELDS, *(f.name for f in EXPORTED_FIELDS))

# The exported fields the flat exports (CSV, Parquet) have as plain columns, in order, after the item's fields and
# ``tags``, ``caption`` and ``output`` (which they write in a shape of their own).
FLAT: tuple[ResultField, ...] = tuple(f for f in EXPORTED_FIELDS if f.flat and f.name not in ("output", "tags"))

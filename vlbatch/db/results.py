"""A finished item with its result, read as one shape: ``ResultRecord``.

Every reader of results (the API's pages and exports, the CLI's ``--out`` file, the XMP sidecars, OpenAI batch
output, the dashboard's cards and tag edits) gets records from here, built from the same columns by ``record``
(``vlbatch.db.result_fields`` declares them), so no one unpacks a row by position and an item without a result looks
the same to all of them (no output, no marker, zero tokens).
"""

from __future__ import annotations

import json
from collections import namedtuple
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from sqlalchemy import Text, cast, select
from sqlalchemy.orm import Session

from vlbatch.db.models import Item, ItemStatus, Result
from vlbatch.db.result_fields import ITEM_FIELDS, READ_FIELDS
from vlbatch.db.tags import merged_tags, model_tags, tags_json

__all__ = [
    "RECORD_FIELDS",
    "RESULT_COLUMNS",
    "ROW_AT",
    "ResultRecord",
    "finished_rows",
    "iter_results",
    "list_results",
    "record",
    "result_of",
    "select_records",
    "stored_tags",
]

# The columns a record is read from, in ``ResultRecord``'s order (``result_fields``): the item's, ``Result.item_id``
# (None for an item without a result), then the result's read fields; json ones (``output``, ``tags``) as the stored
# text (None when SQL NULL), not decoded: an export writes them out as they are.
RESULT_COLUMNS: tuple[Any, ...] = (
    *(getattr(Item, "id" if name == "item_id" else name) for name in ITEM_FIELDS),
    Result.item_id,
    *(cast(getattr(Result, f.name), Text).label(f.name) if f.json else getattr(Result, f.name) for f in READ_FIELDS),
)
_HAS = len(ITEM_FIELDS)  # where ``Result.item_id`` is
_END = len(RESULT_COLUMNS)  # where ``Item.inputs`` is, when read
_EMPTY = tuple(f.empty for f in READ_FIELDS)  # an item without a result: no output, no marker, zero tokens


# The record's fields: the item's, ``has_result``, the result's read fields in declaration order, then ``inputs``.
RECORD_FIELDS: tuple[str, ...] = (*ITEM_FIELDS, "has_result", *(str(f.read) for f in READ_FIELDS), "inputs")

if TYPE_CHECKING:

    class _Fields(NamedTuple):
        """The record's fields as the type checker sees them, typed: the record's first ones, in its order
        (``tests/db/test_result_fields.py`` holds them to ``RECORD_FIELDS``). A field declared since is on every
        record and in every export without being written here; a reader that reads it by name adds it here, typed
        (a misspelt name stays an error, not ``Any``)."""

        item_id: int
        seq: int
        ref: str | None
        status: str
        error_code: str | None
        error_message: str | None
        has_result: bool
        output_text: str | None
        raw_text: str | None
        prompt_tokens: int
        completion_tokens: int
        model: str | None
        model_revision: str | None
        pipeline_version: str | None
        options_hash: str | None
        tags_text: str | None
        reused_from: int | None = None  # the item whose answer this result copies (duplicates run once)
        prompt_hash: str | None = None  # of the prompt text the engine answered
        inputs: dict[str, Any] | None = None

else:
    # Built from the declaration; a result's fields default to their value for an item without a result.
    _Fields = namedtuple("_Fields", RECORD_FIELDS, defaults=(*(f.empty for f in READ_FIELDS), None))


class ResultRecord(_Fields):
    """One finished item (succeeded or failed) and its result, if it has one. Immutable.

    ``output_text`` and ``tags_text`` are the stored JSON texts; ``output``, ``tags``, ``tag_names`` and
    ``caption`` decode them. ``inputs`` is the item's inputs when they were asked for (the sidecars need the
    photos' paths), else None. A named tuple rather than a frozen dataclass: an export builds one per row, and a
    frozen dataclass's ``__init__`` (a ``object.__setattr__`` per field) costs three times as much.
    """

    __slots__ = ()

    @property
    def output(self) -> Any:
        """The answer, decoded (None for an item without a result, or a result without an answer)."""
        return json.loads(self.output_text) if self.output_text else None

    @property
    def tags(self) -> list[dict[str, Any]] | None:
        """The model's tags merged with those edited by hand (``{"tag", "source", "by", "at"}`` each); for a result
        written before tags had sources, its output's tags; None for an output without a tag list."""
        if self.tags_text is not None:
            stored: list[dict[str, Any]] | None = json.loads(self.tags_text)
            return stored
        return merged_tags(self.output, []) if self.has_result else None

    @property
    def tags_json(self) -> str:
        """``tags`` as JSON text, the stored text itself when there is one (the JSONL export's fast path)."""
        return self.tags_text if self.tags_text is not None else json.dumps(self.tags)

    @property
    def tag_names(self) -> list[str] | None:
        tags = self.tags
        if tags is None:
            return model_tags(self.output)
        return [t["tag"] for t in tags if isinstance(t, dict) and isinstance(t.get("tag"), str)]

    @property
    def caption(self) -> str | None:
        output = self.output
        caption = output.get("caption") if isinstance(output, dict) else None
        return caption if isinstance(caption, str) else None


# Where a field is in a row of ``RESULT_COLUMNS``, by the record's field name: a row holds a record's fields in its
# order but for ``has_result``, which is the result's item id (None without a result), and it has no ``inputs``. The
# exports write pages of rows a column at a time (``jobs.exports.jsonl.jsonl_rows``, ``parquet.rows_batch``).
ROW_AT: dict[str, int] = {name: i for i, name in enumerate(RECORD_FIELDS[:-1])}


def stored_tags(columns: Sequence[Sequence[Any]]) -> list[str]:
    """Each row's ``ResultRecord.tags_json`` from a page's columns of ``RESULT_COLUMNS``: the stored text, the
    merge of its output's tags for a result written before tags had sources, ``null`` without a result."""
    has, outputs, tags = columns[_HAS], columns[ROW_AT["output_text"]], columns[ROW_AT["tags_text"]]
    return [
        ("null" if h is None else tags_json(None, output)) if t is None else t
        for t, h, output in zip(tags, has, outputs, strict=True)
    ]


def record(row: Sequence[Any]) -> ResultRecord:
    """The one place a row of ``RESULT_COLUMNS`` (then, if read, ``Item.inputs``) becomes a record."""
    inputs = row[_END] if len(row) > _END else None
    if row[_HAS] is None:
        return _make((*row[:_HAS], False, *_EMPTY, inputs))
    return _make((*row[:_HAS], True, *row[_HAS + 1 : _END], inputs))


_make = ResultRecord._make


def select_records(*, with_inputs: bool = False) -> Any:
    """The SELECT of ``RESULT_COLUMNS`` (then ``Item.inputs``) over items and their results, for ``record``."""
    cols = (*RESULT_COLUMNS, Item.inputs) if with_inputs else RESULT_COLUMNS
    return select(*cols).outerjoin(Result, Result.item_id == Item.id)


def iter_results(
    session: Session, *, job_id: str, page_size: int = 2000, with_inputs: bool = False, every_item: bool = False
) -> Iterator[list[ResultRecord]]:
    """Every finished item of a job as records, in seq order, in pages: one query read ``page_size`` rows at a
    time through a server-side cursor (PostgreSQL) or SQLite's stepping cursor, so a reader of any job holds one
    page in memory and the query runs once (keyset pages would run it again per page). The exports read their rows
    through ``vlbatch.db.row_stream`` instead.
    ``every_item``: the items that did not finish too (a batch's output has a line for each of its lines)."""
    stmt = finished_rows(select_records(with_inputs=with_inputs), job_id=job_id, every_item=every_item)
    result = session.connection().execute(stmt, execution_options={"yield_per": page_size})
    try:
        for page in result.tuples().partitions():  # Core: no ORM rows
            yield [record(row) for row in page]
    finally:
        result.close()


def finished_rows(stmt: Any, *, job_id: str, every_item: bool = False) -> Any:
    """``stmt`` (a SELECT over items and their results, ``select_records``) for a job's finished items (or all of
    them, ``every_item``), in seq order."""
    stmt = stmt.where(Item.job_id == job_id)
    if not every_item:
        stmt = stmt.where(Item.status.in_([ItemStatus.SUCCEEDED, ItemStatus.FAILED]))
    return stmt.order_by(Item.seq)


def list_results(session: Session, *, job_id: str, after_written: int, limit: int) -> list[tuple[int, ResultRecord]]:
    """Finished items with their results in write order (``Item.written_seq``), after position ``after_written``,
    as (write position, record): a page read while the job runs, followed later from its last position, misses no
    item (``outcomes.take_positions``)."""
    stmt = (
        select_records()
        .add_columns(Item.written_seq)
        .where(Item.job_id == job_id, Item.written_seq > after_written)
        .order_by(Item.written_seq)
        .limit(limit)
    )
    return [(row[-1], record(row[:-1])) for row in session.execute(stmt).tuples()]


def result_of(session: Session, *, item_id: int) -> ResultRecord | None:
    """One item as a record (finished or not: an item being tagged by hand is read back through here)."""
    row = session.execute(select_records().where(Item.id == item_id)).first()
    return record(row) if row is not None else None

"""Results as Parquet, for dataframes and warehouses: one row per finished item, typed columns.

Written a page of records at a time, each page one Arrow record batch and one row group, and the bytes handed on
after each (``parquet_chunks``): a job of any size holds one page in memory, whether it streams over HTTP or goes to
a file.
``tags`` is ``list<string>`` (the model's merged with those edited by hand) with ``tag_sources`` beside it
(``model`` or ``manual``, one per tag); ``output`` is the answer's JSON text, as the JSONL export has it; the
pipeline's own columns (``Pipeline.flat_columns``) come last, as strings. pyarrow is imported when a file is
written, not when the module is.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from functools import cache
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from jobs.exports.columns import FlatColumns
from vlbatch.db.result_fields import FLAT, ITEM_FIELDS, ResultField
from vlbatch.db.results import ROW_AT, ResultRecord, record, stored_tags

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["parquet_chunks", "parquet_file_chunks", "parquet_schema", "record_batch", "rows_batch"]

_STRINGS = ("ref", "status", "error_code", "error_message")
_RESULT_STRINGS = ("caption", "output", "raw_text")
# The declaration's flat fields (``vlbatch.db.result_fields.FLAT``), after the answer: an ``integer`` one that is 0
# without a result is never null, the others are nullable; ``json`` ones are their stored text.
_FLAT_READS = tuple(str(f.read) for f in FLAT)
_FLAT_NAMES = tuple(f.name for f in FLAT)
_flat_values = attrgetter(*_FLAT_READS)


def parquet_schema(flat: FlatColumns | None = None) -> pa.Schema:
    import pyarrow as pa

    text = pa.string()
    return pa.schema(
        [
            pa.field("item_id", pa.int64(), nullable=False),
            pa.field("seq", pa.int64(), nullable=False),
            *(pa.field(name, text) for name in _STRINGS),
            pa.field("tags", pa.list_(text)),
            pa.field("tag_sources", pa.list_(text)),
            *(pa.field(name, text) for name in _RESULT_STRINGS),
            *(_field(f) for f in FLAT),
            *(pa.field(name, text) for name in (flat.names if flat else ())),
        ]
    )


def _field(f: ResultField) -> pa.Field:
    import pyarrow as pa

    if f.sql == "integer":
        return pa.field(f.name, pa.int64(), nullable=f.empty is None)
    return pa.field(f.name, pa.string())


def _columns(page: Sequence[ResultRecord], names: Sequence[str], flat: FlatColumns | None) -> dict[str, list[Any]]:
    cols: dict[str, list[Any]] = {name: [] for name in names}
    for r in page:
        tags = r.tags
        values = {
            "item_id": r.item_id,
            "seq": r.seq,
            "ref": r.ref,
            "status": r.status,
            "error_code": r.error_code,
            "error_message": r.error_message,
            "tags": [t["tag"] for t in tags] if tags is not None else None,
            "tag_sources": [t["source"] for t in tags] if tags is not None else None,
            "caption": r.caption,
            "output": r.output_text,
            "raw_text": r.raw_text,
        }
        values.update(zip(_FLAT_NAMES, _flat_values(r), strict=True))
        if flat is not None:
            values.update(zip(flat.names, flat.values(r), strict=True))
        for name, value in values.items():
            cols[name].append(value)
    return cols


# A page of rows (``vlbatch.db.results.RESULT_COLUMNS``) becomes a record batch a column at a time: the tags and the
# caption are read out of the stored JSON texts by Arrow's JSON reader in one call per page (one line per row:
# ``{"t": <tags>, "o": <output>}``), the other columns are the rows' values. A page the reader refuses (an answer
# that is not an object, a caption that is not a string, tags that are not a list of objects) is made from its
# records, as ``record_batch``; the batches are the same (``tests/jobs/exports/test_row_writers.py``).
_OUTPUT, _RAW = ROW_AT["output_text"], ROW_AT["raw_text"]
_PAIR = '{"t":%s,"o":%s}'


@cache
def _json_schema() -> pa.Schema:
    import pyarrow as pa

    tag = pa.struct([("tag", pa.string()), ("source", pa.string())])
    return pa.schema([("t", pa.list_(tag)), ("o", pa.struct([("caption", pa.string())]))])


def _tags_and_captions(columns: Sequence[Sequence[Any]]) -> tuple[pa.Array, pa.Array, pa.Array]:
    """(tag names, tag sources, captions) of a page; ``pa.ArrowInvalid`` where a row's JSON is not of that shape."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.json as pj

    outputs = ["null" if o is None else o for o in columns[_OUTPUT]]
    lines = "\n".join(map(_PAIR.__mod__, zip(stored_tags(columns), outputs, strict=True))).encode()
    table = pj.read_json(
        pa.py_buffer(lines),
        read_options=pj.ReadOptions(use_threads=False, block_size=max(1 << 20, len(lines) + 1)),
        parse_options=pj.ParseOptions(explicit_schema=_json_schema(), unexpected_field_behavior="ignore"),
    )
    listed, answer = table.column("t").combine_chunks(), table.column("o").combine_chunks()
    mask = listed.is_null()
    names = pa.ListArray.from_arrays(listed.offsets, pc.struct_field(listed.values, "tag"), mask=mask)
    sources = pa.ListArray.from_arrays(listed.offsets, pc.struct_field(listed.values, "source"), mask=mask)
    return names, sources, pc.struct_field(answer, "caption")


def rows_batch(rows: Sequence[Sequence[Any]], schema: pa.Schema) -> pa.RecordBatch:
    """A page of rows (``RESULT_COLUMNS``) as one record batch of ``parquet_schema()``: the batch ``record_batch``
    makes of their records."""
    import pyarrow as pa
    import pyarrow.compute as pc

    columns = list(zip(*rows, strict=True))
    try:
        names, sources, captions = _tags_and_captions(columns)
    except pa.ArrowInvalid:
        return record_batch([record(row) for row in rows], schema, None)
    text = pa.string()
    arrays = [
        *(pa.array(columns[ROW_AT[name]], type=schema.field(name).type) for name in ITEM_FIELDS),
        names,
        sources,
        captions,
        pa.array(columns[_OUTPUT], type=text),
        pa.array(columns[_RAW], type=text),
    ]
    for f in FLAT:
        values = pa.array(columns[ROW_AT[str(f.read)]], type=schema.field(f.name).type)
        arrays.append(pc.fill_null(values, f.empty) if f.empty is not None else values)
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


class _Buffer:
    """What the Parquet writer writes, kept until the next ``take``."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []
        self._written = 0
        self.closed = False

    def write(self, data: Any) -> int:
        chunk = bytes(data)
        self._parts.append(chunk)
        self._written += len(chunk)
        return len(chunk)

    def tell(self) -> int:
        return self._written

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def take(self) -> bytes:
        data, self._parts = b"".join(self._parts), []
        return data


def record_batch(page: Sequence[ResultRecord], schema: pa.Schema, flat: FlatColumns | None) -> pa.RecordBatch:
    """A page of records as one record batch of ``schema`` (``parquet_schema(flat)``)."""
    import pyarrow as pa

    return pa.RecordBatch.from_pydict(_columns(page, schema.names, flat), schema=schema)


def parquet_chunks(pages: Iterable[Sequence[ResultRecord]], flat: FlatColumns | None = None) -> Iterator[bytes]:
    """The Parquet file of these pages, in pieces: the header and each row group as it is written, then the
    footer. An empty job is a valid file with no rows."""
    schema = parquet_schema(flat)
    return parquet_file_chunks((record_batch(page, schema, flat) for page in pages if page), schema)


def parquet_file_chunks(batches: Iterable[pa.RecordBatch], schema: pa.Schema) -> Iterator[bytes]:
    """The Parquet file of these record batches, one row group each, in pieces as they are written."""
    import pyarrow.parquet as pq

    sink = _Buffer()
    writer = pq.ParquetWriter(sink, schema, compression="zstd")
    try:
        for batch in batches:
            writer.write_batch(batch, row_group_size=batch.num_rows)
            yield sink.take()
    finally:
        writer.close()
    yield sink.take()

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
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from jobs.exports.columns import FlatColumns
from vlbatch.db.result_fields import FLAT, ResultField
from vlbatch.db.results import ResultRecord

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["parquet_chunks", "parquet_schema"]

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


def parquet_chunks(pages: Iterable[Sequence[ResultRecord]], flat: FlatColumns | None = None) -> Iterator[bytes]:
    """The Parquet file of these pages, in pieces: the header and each row group as it is written, then the
    footer. An empty job is a valid file with no rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = parquet_schema(flat)
    sink = _Buffer()
    writer = pq.ParquetWriter(sink, schema, compression="zstd")
    try:
        for page in pages:
            if page:
                batch = pa.RecordBatch.from_pydict(_columns(page, schema.names, flat), schema=schema)
                writer.write_batch(batch, row_group_size=len(page))
                yield sink.take()
    finally:
        writer.close()
    yield sink.take()

"""Results as Parquet, for dataframes and warehouses: one row per finished item, typed columns.

Written a page of ``crud.RESULT_COLUMNS`` at a time, each page one row group, and the bytes handed on after
each (``parquet_chunks``): a job of any size holds one page in memory, whether it streams over HTTP or goes to
a file. ``tags`` is ``list<string>`` (the model's merged with those edited by hand) with ``tag_sources`` beside
it (``model`` or ``manual``, one per tag); ``output`` is the answer's JSON text, as the JSONL export has it.
pyarrow is imported when a file is written, not when the module is.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vlbatch.db.tags import merged_tags

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["parquet_chunks", "parquet_schema", "write_parquet"]

_STRINGS = ("ref", "status", "error_code", "error_message")
_RESULT_STRINGS = ("caption", "output", "raw_text")
_MARKER = ("model", "pipeline_version", "options_hash")


def parquet_schema() -> pa.Schema:
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
            pa.field("prompt_tokens", pa.int64(), nullable=False),
            pa.field("completion_tokens", pa.int64(), nullable=False),
            *(pa.field(name, text) for name in _MARKER),
        ]
    )


def _columns(page: Sequence[tuple[Any, ...]]) -> dict[str, list[Any]]:
    cols: dict[str, list[Any]] = {name: [] for name in parquet_schema().names}
    for (
        item_id,
        seq,
        ref,
        status,
        code,
        message,
        res_id,
        output,
        raw,
        p_tok,
        c_tok,
        model,
        version,
        o_hash,
        tags,
    ) in page:
        decoded = json.loads(output) if output else None
        merged = json.loads(tags) if tags else (merged_tags(decoded, []) if res_id is not None else None)
        caption = decoded.get("caption") if isinstance(decoded, dict) else None
        has = res_id is not None
        values = {
            "item_id": item_id,
            "seq": seq,
            "ref": ref,
            "status": status,
            "error_code": code,
            "error_message": message,
            "tags": [t["tag"] for t in merged] if merged is not None else None,
            "tag_sources": [t["source"] for t in merged] if merged is not None else None,
            "caption": caption if isinstance(caption, str) else None,
            "output": output if has else None,
            "raw_text": raw if has else None,
            "prompt_tokens": p_tok if has else 0,
            "completion_tokens": c_tok if has else 0,
            "model": model if has else None,
            "pipeline_version": version if has else None,
            "options_hash": o_hash if has else None,
        }
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


def parquet_chunks(pages: Iterable[Sequence[tuple[Any, ...]]]) -> Iterator[bytes]:
    """The Parquet file of these pages (``crud.RESULT_COLUMNS`` tuples), in pieces: the header and each row
    group as it is written, then the footer. An empty job is a valid file with no rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = parquet_schema()
    sink = _Buffer()
    writer = pq.ParquetWriter(sink, schema, compression="zstd")
    try:
        for page in pages:
            if page:
                writer.write_table(pa.Table.from_pydict(_columns(page), schema=schema), row_group_size=len(page))
                yield sink.take()
    finally:
        writer.close()
    yield sink.take()


def write_parquet(pages: Iterable[Sequence[tuple[Any, ...]]], path: Path) -> int:
    """Write the pages to ``path`` as Parquet; returns the rows written."""
    rows = 0

    def counted() -> Iterator[Sequence[tuple[Any, ...]]]:
        nonlocal rows
        for page in pages:
            rows += len(page)
            yield page

    with path.open("wb") as fh:
        for chunk in parquet_chunks(counted()):
            fh.write(chunk)
    return rows

"""A job's export, read from the database and written by its format's writer: the API's ``/results.jsonl``,
``.csv`` and ``.parquet`` (``JobExport``) and a file whose suffix chooses the format (``write_export``: what
``vlbatch tag --out`` and ``vlbatch docs --out`` write). Both are the same bytes for the same job.

The rows are read as plain tuples (``vlbatch.db.row_stream``); JSONL and Parquet are written from them a column at
a time (``jsonl.jsonl_rows``, ``parquet.rows_batch``), CSV and a pipeline's own Parquet columns from records
(``export_chunks``). Either way the bytes are those of the record writers.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from jobs.exports.columns import FlatColumns
from jobs.exports.csv_writer import csv_chunks
from jobs.exports.jsonl import jsonl_chunks, jsonl_rows
from jobs.exports.parquet import parquet_chunks, parquet_file_chunks, parquet_schema, rows_batch
from vlbatch.db.models import Job
from vlbatch.db.results import ResultRecord, finished_rows, record, select_records
from vlbatch.db.row_stream import row_pages

__all__ = ["PAGE_ROWS", "JobExport", "export_chunks", "write_export"]

PAGE_ROWS = 2000  # rows read and written per chunk (a Parquet row group) by every export


def export_chunks(fmt: str, pages: Iterable[Sequence[ResultRecord]], *, pipeline: str | None) -> Iterator[bytes]:
    """The export of these pages in ``fmt`` (``jsonl``, ``csv`` or ``parquet``) of a job of ``pipeline``."""
    if fmt == "csv":
        return csv_chunks(pages, FlatColumns(pipeline))
    if fmt == "parquet":
        return parquet_chunks(pages, FlatColumns(pipeline))
    return jsonl_chunks(pages)


class JobExport:
    """A job's export in one format, its bytes a page at a time, read through ``session``'s one streaming cursor
    (``vlbatch.db.row_stream``: read ahead on PostgreSQL); ``rows`` counts the rows read so far. The cursor is
    closed when the chunks end or the reader stops early (a client that hung up mid-export)."""

    def __init__(self, fmt: str, session: Session, *, job_id: str, pipeline: str | None, page_size: int = PAGE_ROWS):
        self.rows = 0
        self._source = row_pages(session, finished_rows(select_records(), job_id=job_id), page_size=page_size)
        pages = self._counted(self._source)
        if fmt == "jsonl":
            self._chunks: Iterator[bytes] = (jsonl_rows(page) for page in pages if page)
        elif fmt == "parquet" and not FlatColumns(pipeline).names:
            schema = parquet_schema()
            self._chunks = parquet_file_chunks((rows_batch(page, schema) for page in pages if page), schema)
        else:  # CSV, and a pipeline's own columns: from records
            records = ([record(row) for row in page] for page in pages)
            self._chunks = export_chunks(fmt, records, pipeline=pipeline)

    def _counted(self, pages: Iterable[Sequence[Any]]) -> Iterator[Sequence[Any]]:
        for page in pages:
            self.rows += len(page)
            yield page

    def __iter__(self) -> Iterator[bytes]:
        try:
            yield from self._chunks
        finally:  # the writer, then the cursor, closed now rather than when they are collected
            self._chunks.close()  # type: ignore[attr-defined]
            self._source.close()  # type: ignore[attr-defined]


def write_export(sessions: sessionmaker[Session], job_id: str, out: Path, *, page_size: int = PAGE_ROWS) -> int:
    """Write every finished item of ``job_id`` to ``out``, one page at a time; returns the rows written."""
    fmt = {".csv": "csv", ".parquet": "parquet"}.get(out.suffix, "jsonl")
    out.parent.mkdir(parents=True, exist_ok=True)
    with sessions() as s, out.open("wb") as fh:
        job = s.get(Job, job_id)
        export = JobExport(
            fmt, s, job_id=job_id, pipeline=job.pipeline if job is not None else None, page_size=page_size
        )
        for chunk in export:
            fh.write(chunk)
    return export.rows

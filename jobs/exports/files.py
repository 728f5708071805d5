"""A job's results written to a file, the format chosen by the file's suffix: ``.csv``, ``.parquet``, else JSONL.

The bytes are those of the API's export of the same job (``/results.csv``, ``.parquet``, ``.jsonl``): the same
writer, the same pages of records. This is what ``vlbatch tag --out`` and ``vlbatch docs --out`` write.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from jobs.exports.columns import FlatColumns
from jobs.exports.csv_writer import csv_chunks
from jobs.exports.jsonl import jsonl_chunks
from jobs.exports.parquet import parquet_chunks
from vlbatch.db.models import Job
from vlbatch.db.results import ResultRecord, iter_results

__all__ = ["PAGE_ROWS", "export_chunks", "write_export"]

PAGE_ROWS = 2000  # rows read and written per chunk (a Parquet row group) by every export


def export_chunks(fmt: str, pages: Iterable[Sequence[ResultRecord]], *, pipeline: str | None) -> Iterator[bytes]:
    """The export of these pages in ``fmt`` (``jsonl``, ``csv`` or ``parquet``) of a job of ``pipeline``."""
    if fmt == "csv":
        return csv_chunks(pages, FlatColumns(pipeline))
    if fmt == "parquet":
        return parquet_chunks(pages, FlatColumns(pipeline))
    return jsonl_chunks(pages)


def write_export(sessions: sessionmaker[Session], job_id: str, out: Path, *, page_size: int = PAGE_ROWS) -> int:
    """Write every finished item of ``job_id`` to ``out``, one page at a time; returns the rows written."""
    fmt = {".csv": "csv", ".parquet": "parquet"}.get(out.suffix, "jsonl")
    rows = 0

    def counted(pages: Iterable[list[ResultRecord]]) -> Iterator[list[ResultRecord]]:
        nonlocal rows
        for page in pages:
            rows += len(page)
            yield page

    out.parent.mkdir(parents=True, exist_ok=True)
    with sessions() as s, out.open("wb") as fh:
        job = s.get(Job, job_id)
        pipeline = job.pipeline if job is not None else None
        pages = counted(iter_results(s, job_id=job_id, page_size=page_size))
        for chunk in export_chunks(fmt, pages, pipeline=pipeline):
            fh.write(chunk)
    return rows

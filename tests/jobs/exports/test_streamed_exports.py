"""Exports read through a streaming cursor (``vlbatch.db.results.iter_results``): on PostgreSQL a server-side cursor
is open while the pages are read; whatever the page size, each format's bytes (Parquet: its rows) are those of the
whole job read at once and written as one page; on SQLite and PostgreSQL."""

from __future__ import annotations

import io

import pytest
from sqlalchemy import select

from jobs.exports.files import export_chunks, write_export
from vlbatch.db import job_store
from vlbatch.db.models import Item, Result
from vlbatch.db.results import iter_results, record, select_records
from vlbatch.db.session import make_engine, make_sessionmaker, migrate

N = 300


def _finished_job(db_url: str):  # type: ignore[no-untyped-def]
    migrate(db_url)
    factory = make_sessionmaker(make_engine(db_url))
    new = [job_store.NewItem(inputs={"images": [f"/a/{i}.jpg"]}, ref=f"r{i}") for i in range(N)]
    with factory() as s:
        job = job_store.create_job(s, pipeline="image_tagging", model="m", options={}, items=new, chunk_size=50)
        for it in s.scalars(select(Item).where(Item.job_id == job.id)):
            it.status = "failed" if it.seq % 10 == 3 else "succeeded"
            output = None if it.seq % 10 == 3 else {"tags": ["sea", f"t{it.seq}"], "caption": f"é {it.seq}"}
            s.add(
                Result(
                    item_id=it.id,
                    job_id=job.id,
                    output=output,
                    raw_text=f"raw{it.seq}",
                    prompt_tokens=it.seq,
                    completion_tokens=1,
                    model="m",
                    pipeline_version="1",
                    options_hash="h",
                )
            )
        s.commit()
        return factory, job.id


def test_a_postgresql_export_reads_through_a_server_side_cursor(db_url: str) -> None:
    factory, job_id = _finished_job(db_url)
    with factory() as s:
        pages = iter_results(s, job_id=job_id, page_size=40)
        first = next(pages)
        if db_url.startswith("postgresql"):  # the rest of the job waits in the server's cursor, not in this process
            assert s.connection().exec_driver_sql("SELECT count(*) FROM pg_cursors").scalar() == 1
        assert len(first) + sum(len(p) for p in pages) == N


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_streamed_exports_equal_the_job_read_at_once(db_url: str, tmp_path, fmt: str) -> None:  # type: ignore[no-untyped-def]
    factory, job_id = _finished_job(db_url)
    with factory() as s:
        rows = s.execute(select_records().where(Item.job_id == job_id).order_by(Item.seq)).all()
        whole = b"".join(export_chunks(fmt, [[record(r) for r in rows]], pipeline="image_tagging"))
    out = tmp_path / f"out.{fmt}"
    assert write_export(factory, job_id, out, page_size=7) == N
    if fmt != "parquet":
        assert out.read_bytes() == whole
    else:  # one row group a page: the rows and their types are the same
        import pyarrow.parquet as pq

        streamed, at_once = pq.read_table(out), pq.read_table(io.BytesIO(whole))
        assert pq.ParquetFile(out).num_row_groups == -(-N // 7)
        assert streamed.equals(at_once)

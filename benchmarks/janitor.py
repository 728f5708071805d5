"""Prints the janitor's throughput on PostgreSQL: N expired result rows (with their items and chunks, over a few
ended jobs) seeded in bulk with INSERT ... SELECT generate_series, then one janitor pass (``jobs.janitor.sweep``)
timed: rows and bytes deleted a second, and the longest single transaction, which is the longest any row lock was
held. A live job of the same size sits beside them and must be left whole.

Usage: python benchmarks/janitor.py N [--url POSTGRES_URL] [--jobs J] [--batch-rows B]

Without ``--url`` it makes a database of its own on ``postgresql://127.0.0.1:5432`` (the ``--admin-url``) and
drops it after.
"""

from __future__ import annotations

import argparse
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

from sqlalchemy import func, select, text

from jobs import janitor
from vlbatch.db.models import Item, Job, Result, utcnow
from vlbatch.db.session import make_engine, make_sessionmaker, migrate
from vlbatch.settings import Settings

CHUNK = 64
OUTPUT = '{"tags": ["beach", "sunset", "people", "sea", "sky"], "caption": "a beach at sunset with people"}'
RAW = '{"tags": ["beach", "sunset", "people", "sea", "sky"], "caption": "a beach at sunset with people"}'


@contextmanager
def _own_database(admin_url: str) -> Iterator[str]:
    import psycopg

    name = f"vlbatch_bench_janitor_{uuid.uuid4().hex[:8]}"
    admin = psycopg.connect(admin_url, autocommit=True)
    admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{admin_url.rsplit('/', 1)[0].replace('postgresql://', 'postgresql+psycopg://')}/{name}"
    finally:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


def _seed_job(conn: Any, *, job_id: str, n: int, ended_days_ago: float | None) -> None:
    """One job of ``n`` succeeded items with a result each; ended that many days ago, or running (None)."""
    ended = utcnow() - timedelta(days=ended_days_ago) if ended_days_ago is not None else None
    conn.execute(
        text(
            "INSERT INTO jobs (id, tenant, pipeline, model, priority, status, options, options_hash, total,"
            " created_at, finished_at, energy_unmetered_tokens, results_written)"
            " VALUES (:id, 'bench', 'image_tagging', 'm', 'batch', :status, '{}', 'h', :n, :created, :ended, 0, :n)"
        ),
        {
            "id": job_id,
            "status": "finished" if ended else "running",
            "n": n,
            "created": ended or utcnow(),
            "ended": ended,
        },
    )
    conn.execute(
        text(
            "INSERT INTO chunks (job_id, seq, done, sends) SELECT :job, g, :done, 0"
            " FROM generate_series(0, :chunks - 1) g"
        ),
        {"job": job_id, "chunks": (n + CHUNK - 1) // CHUNK, "done": ended is not None},
    )
    conn.execute(
        text(
            "INSERT INTO items (job_id, chunk_id, seq, ref, inputs, status, attempts, crash_count, updated_at,"
            " written_seq)"
            " SELECT :job, c.id, g, 'img' || g || '.jpg', '{\"images\": [\"x.jpg\"]}', 'succeeded', 1, 0, now(), g"
            " FROM generate_series(0, :n - 1) g JOIN chunks c ON c.job_id = :job AND c.seq = g / :chunk"
        ),
        {"job": job_id, "n": n, "chunk": CHUNK},
    )
    conn.execute(
        text(
            "INSERT INTO results (item_id, job_id, output, raw_text, prompt_tokens, completion_tokens, model,"
            " pipeline_version, options_hash, created_at)"
            " SELECT id, job_id, CAST(:output AS json), :raw, 100, 20, 'm', '1', 'h', now()"
            " FROM items WHERE job_id = :job"
        ),
        {"job": job_id, "output": OUTPUT, "raw": RAW},
    )


def run(url: str, n: int, jobs: int, batch_rows: int) -> None:
    migrate(url)
    engine = make_engine(url)
    sessions = make_sessionmaker(engine)
    started = time.perf_counter()
    per_job = max(n // jobs, 1)
    with engine.begin() as conn:
        for j in range(jobs):
            _seed_job(conn, job_id=f"expired{j:04d}", n=per_job, ended_days_ago=30)
        _seed_job(conn, job_id="live", n=per_job, ended_days_ago=None)
    with engine.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT").execute(text("ANALYZE"))
    seeded = time.perf_counter() - started
    print(f"seeded {per_job * jobs:,} expired result rows over {jobs} jobs (+ a live job) in {seeded:.1f} s")

    settings = Settings(database_url=url, retention_jobs_s=86400, janitor_batch_rows=batch_rows)
    started = time.perf_counter()
    report = janitor.sweep(settings, sessions)
    took = time.perf_counter() - started
    rows = sum(report.rows.values())
    with sessions() as s:
        left = s.scalar(select(func.count()).select_from(Result))
        live_items = s.scalar(select(func.count()).where(Item.job_id == "live"))
        assert s.scalar(select(func.count()).select_from(Job)) == 1, "only the live job is left"
    assert left == per_job and live_items == per_job, "the live job is left whole"
    print(f"deleted {dict(report.rows)} and {report.bytes:,} bytes in {took:.1f} s")
    print(
        f"{rows / took:,.0f} rows/s, {report.rows['results'] / took:,.0f} result rows/s, "
        f"{report.bytes / took / 1e6:,.2f} MB/s; {report.transactions} transactions of at most {batch_rows} items, "
        f"the longest {report.longest_transaction_s * 1000:.0f} ms"
    )
    engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n", type=int, help="expired result rows to seed")
    parser.add_argument("--url", help="a PostgreSQL database to use (default: one of its own, dropped after)")
    parser.add_argument("--admin-url", default="postgresql://127.0.0.1:5432/postgres")
    parser.add_argument("--jobs", type=int, default=10, help="the expired jobs the rows are spread over")
    parser.add_argument("--batch-rows", type=int, default=1000, help="VLBATCH_JANITOR_BATCH_ROWS")
    args = parser.parse_args()
    if args.url:
        run(args.url, args.n, args.jobs, args.batch_rows)
        return
    with _own_database(args.admin_url) as url:
        run(url, args.n, args.jobs, args.batch_rows)


if __name__ == "__main__":
    main()

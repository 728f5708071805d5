"""Claim latency against the queue's length: p50/p99 of a worker's claim with 10 to 10,000 queued jobs.

A queue (one model, priority ``batch``) is seeded with ``jobs`` queued jobs spread over ``tenants`` tenants (one
job in four with a deadline, due over the next hours), each of one-item chunks, enough for every claim. Then
``claims`` messages are delivered in send order and each is claimed as the engine worker claims
(``vlbatch.db.claim_order.claim_next`` in a session of its own, committed): fair shares between the tenants,
earliest deadline first within each. The timed span is the claim and its commit; the claimed chunk is then
finished (untimed), so jobs finish and the claim counters fill as in service. A few claims first warm the
connection pool and are not counted.

Usage: python benchmarks/claim_latency.py [--jobs 10 1000 10000] [--tenants 100] [--claims 200]
       [--pg-admin-url postgresql://127.0.0.1:5432/test] [--no-sqlite] [--no-postgres]
``measure(db_url, jobs, tenants, claims)`` is the one row's figures, for other benchmarks (``benchmarks/scale.py``).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import insert
from sqlalchemy.orm import Session, sessionmaker

from vlbatch.db import claim_order, leases
from vlbatch.db.models import Chunk, Item, ItemStatus, Job, JobStatus, utcnow
from vlbatch.db.session import make_engine, make_sessionmaker, migrate

MODEL = "claim-bench"
LEASE = timedelta(minutes=2)
WARMUP = 5  # claims not counted: the pool's first connections, the first plans
_BATCH = 5_000


def seed(sessions: sessionmaker[Session], *, jobs: int, tenants: int, chunks_per_job: int) -> list[int]:
    """Queued jobs of one-item chunks, inserted in bulk; their chunk ids in send order (job by job)."""
    now = utcnow()
    job_rows: list[dict[str, Any]] = []
    for j in range(jobs):
        job_rows.append(
            {
                "id": f"bench{j:08d}{uuid.uuid4().hex[:12]}",
                "tenant": f"tenant{j % tenants:04d}",
                "pipeline": "image_tagging",
                "model": MODEL,
                "priority": "batch",
                "status": JobStatus.QUEUED.value,
                "options": {},
                "options_hash": "0" * 64,
                "total": chunks_per_job,
                "created_at": now + timedelta(microseconds=j),
                "deadline": now + timedelta(hours=1, minutes=j % 600) if j % 4 == 0 else None,
            }
        )
    chunk_rows = [
        {"id": 1 + j * chunks_per_job + c, "job_id": row["id"], "seq": c, "done": False}
        for j, row in enumerate(job_rows)
        for c in range(chunks_per_job)
    ]
    item_rows = [
        {
            "job_id": c["job_id"],
            "chunk_id": c["id"],
            "seq": c["seq"],
            "inputs": {"images": [f"{c['id']}.jpg"]},
            "status": ItemStatus.QUEUED.value,
            "attempts": 0,
            "crash_count": 0,
            "updated_at": now,
        }
        for c in chunk_rows
    ]
    with sessions() as s:
        for table, rows in ((Job, job_rows), (Chunk, chunk_rows), (Item, item_rows)):
            for start in range(0, len(rows), _BATCH):
                s.execute(insert(table), rows[start : start + _BATCH])
        s.commit()
    return [c["id"] for c in chunk_rows]


def _finish(sessions: sessionmaker[Session], chunk_id: int) -> None:
    with sessions() as s:
        for item in s.query(Item).filter(Item.chunk_id == chunk_id):
            item.status = ItemStatus.SUCCEEDED
        s.flush()
        leases.finish_chunk(s, chunk_id=chunk_id, owner="bench")
        s.commit()


def measure(db_url: str, jobs: int, tenants: int, claims: int) -> dict[str, float]:
    """Seed ``db_url`` (an empty database) with ``jobs`` queued jobs over ``tenants`` tenants and time ``claims``
    claims: {"p50_ms", "p99_ms"} of the claim and its commit."""
    migrate(db_url)
    engine = make_engine(db_url)
    sessions = make_sessionmaker(engine)
    try:
        total = claims + WARMUP
        chunks = seed(sessions, jobs=jobs, tenants=min(tenants, jobs), chunks_per_job=max(2, -(-2 * total // jobs)))
        shares = claim_order.Shares()
        times: list[float] = []
        for k in range(total):
            delivered = chunks[k % len(chunks)]
            started = time.perf_counter()
            with sessions() as s:
                leased, _items = claim_order.claim_next(
                    s, delivered=delivered, owner="bench", lease=LEASE, shares=shares, model=MODEL
                )
                s.commit()
            if k >= WARMUP:
                times.append(time.perf_counter() - started)
            if leased is not None:
                _finish(sessions, leased)
    finally:
        engine.dispose()
    cuts = statistics.quantiles(times, n=100, method="inclusive")
    return {"p50_ms": statistics.median(times) * 1e3, "p99_ms": cuts[98] * 1e3}


@contextmanager
def _postgres(admin_url: str) -> Iterator[str]:
    """A PostgreSQL database of its own beside ``admin_url``'s, dropped after."""
    import psycopg

    name = f"vlbatch_claims_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield admin_url.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://") + "/" + name
    finally:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def _sqlite() -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="vlbatch-claims-") as tmp:
        yield f"sqlite:///{Path(tmp) / 'claims.db'}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, nargs="+", default=[10, 1_000, 10_000], help="queued jobs per row")
    parser.add_argument("--tenants", type=int, default=100)
    parser.add_argument("--claims", type=int, default=200, help="timed claims per row (default 200)")
    parser.add_argument("--pg-admin-url", default="postgresql://127.0.0.1:5432/test", help="where to make databases")
    parser.add_argument("--no-sqlite", action="store_true")
    parser.add_argument("--no-postgres", action="store_true")
    args = parser.parse_args()
    databases = [("SQLite", lambda: _sqlite())] if not args.no_sqlite else []
    if not args.no_postgres:
        databases.append(("PostgreSQL", lambda: _postgres(args.pg_admin_url)))
    print("| database | queued jobs | tenants | claims | p50 ms | p99 ms | p99 / p99 at the fewest jobs |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, database in databases:
        first: float | None = None
        for jobs in args.jobs:
            with database() as url:
                got = measure(url, jobs, args.tenants, args.claims)
            first = first or got["p99_ms"]
            print(
                f"| {name} | {jobs:,} | {min(args.tenants, jobs)} | {args.claims} | {got['p50_ms']:.2f} "
                f"| {got['p99_ms']:.2f} | {got['p99_ms'] / first:.2f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()

"""Each tenant's share of a queue's claims under two hostile workloads, on a simulated clock (no engine, no sleeps).

- ``deadline``: tenant a's jobs carry deadlines (one a year past, as rows stored before the API bounded them, one
  due in a minute); tenant b's long job has none.
- ``one-chunk``: tenant a sends a new one-chunk job before every claim; tenant b has one long job.

Every claim is a delivery of one of b's messages (the broker holds b's first), claimed through
``vlbatch.db.claim_order.claim_next`` as a worker would, and the chunk is finished before the next claim. With
fair shares kept, each tenant gets about half; a scheduler that lets a deadline or a fresh job jump the queue
gives a every claim. Run it against an older checkout's ``vlbatch`` to see the shares before.

Usage: python benchmarks/claim_shares.py [--claims N] [--database-url URL]
"""

from __future__ import annotations

import argparse
import tempfile
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path

from sqlalchemy.orm import Session

from jobs.request import JobRequest
from jobs.submit import submit
from vlbatch.db import claim_order, job_store, leases
from vlbatch.db.models import Chunk, Job, utcnow
from vlbatch.db.session import make_engine, make_sessionmaker, migrate
from vlbatch.settings import Settings

LEASE = timedelta(minutes=2)
STEP = timedelta(seconds=1)  # one chunk's run on the simulated clock
SETTINGS = Settings(_env_file=None, chunk_size=1)


def _job(s: Session, *, n: int, tenant: str, deadline: datetime | None = None) -> tuple[str, list[int]]:
    """A job of ``n`` one-item chunks, made as every job is (``jobs.submit``), not sent: the claims below are the
    deliveries."""
    request = JobRequest(
        pipeline="image_tagging",
        options={},
        items=[job_store.NewItem(inputs={"images": [f"{i}.jpg"]}) for i in range(n)],
        model="bench",
        tenant=tenant,
    )
    job = submit(s, SETTINGS, request, publish=False, admit=False)
    job.deadline = deadline  # set on the row: the API refuses a past one, rows stored before it did are probed
    s.commit()
    return job.id, job_store.chunks_of(s, job_id=job.id)


def _claim(s: Session, *, delivered: int, now: datetime) -> str | None:
    """One worker's claim for a delivered message; the chunk is finished at once. The claimed chunk's tenant."""
    leased, items = claim_order.claim_next(
        s, delivered=delivered, owner="w", lease=LEASE, shares=claim_order.Shares(), now=now
    )
    if leased is None:
        return None
    for item in items:
        item.status = "succeeded"
    s.flush()
    leases.finish_chunk(s, chunk_id=leased, owner="w")
    chunk = s.get(Chunk, leased)
    s.commit()
    job = s.get(Job, chunk.job_id) if chunk is not None else None
    return job.tenant if job is not None else None


def deadline_workload(s: Session, claims: int) -> Counter[str | None]:
    t0 = utcnow()
    _, b_chunks = _job(s, n=2 * claims, tenant="b")
    _job(s, n=claims, tenant="a", deadline=t0 + timedelta(minutes=1))
    _job(s, n=claims, tenant="a", deadline=t0 - timedelta(days=365))
    got: Counter[str | None] = Counter()
    for k, delivered in enumerate(b_chunks[:claims]):
        got.update([_claim(s, delivered=delivered, now=t0 + k * STEP)])
    return got


def one_chunk_workload(s: Session, claims: int) -> Counter[str | None]:
    t0 = utcnow()
    _, b_chunks = _job(s, n=2 * claims, tenant="b")
    got: Counter[str | None] = Counter()
    for k, delivered in enumerate(b_chunks[:claims]):
        _job(s, n=1, tenant="a")
        got.update([_claim(s, delivered=delivered, now=t0 + k * STEP)])
    return got


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--claims", type=int, default=20, help="claims per workload (default 20)")
    parser.add_argument("--database-url", help="an empty database (default: a SQLite file in a temp folder)")
    args = parser.parse_args()
    print("| workload | claims | tenant a | tenant b | a's share |\n| --- | --- | --- | --- | --- |")
    for name, workload in (("deadline", deadline_workload), ("one-chunk", one_chunk_workload)):
        with tempfile.TemporaryDirectory() as tmp:
            url = args.database_url or f"sqlite:///{Path(tmp) / 'claims.db'}"
            migrate(url)
            engine = make_engine(url)
            with make_sessionmaker(engine)() as s:
                got = workload(s, args.claims)
            engine.dispose()
        total = sum(got.values())
        print(f"| {name} | {total} | {got['a']} | {got['b']} | {got['a'] / max(total, 1):.0%} |")


if __name__ == "__main__":
    main()

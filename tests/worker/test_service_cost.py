"""The service's own cost per item, as the bench reads it: a worker's claims, writes and chunk finishes add their
wall time and the CPU they took on their own threads' clocks to its counters (``worker/samples.py``), and the
bench's table prints both (``DB ms/item``, ``DB CPU ms/item``). Over a real database, no engine."""

from __future__ import annotations

import threading
from pathlib import Path

from sqlalchemy import update

from benchmarks.harness.report import format_table
from benchmarks.harness.result import ArmResult
from tests.support.db import queued_job
from tests.support.scripted import scripted_context, scripted_runner
from vlbatch.db import job_store
from vlbatch.db.models import Item, ItemStatus
from worker.leases import Leases
from worker.samples import FeederStats


def test_a_claim_and_a_finish_add_their_cpu_beside_their_wall_time(db_url: str, tmp_path: Path) -> None:
    sessions, job_id = queued_job(db_url, n=2, chunk=2)
    with sessions() as s:
        (chunk,) = job_store.chunks_of(s, job_id=job_id)
    stats, closed = FeederStats(), threading.Event()
    leases = Leases(scripted_context(sessions, scripted_runner([], []), tmp_path), stats, held=list, closed=closed)
    try:
        leased, items, _job = leases.claim(chunk)
        assert leased == chunk and len(items) == 2
        claimed = (stats.db_seconds, stats.db_cpu_seconds)
        with sessions() as s:
            s.execute(update(Item).where(Item.chunk_id == chunk).values(status=ItemStatus.SUCCEEDED))
            s.commit()
        leases.finish(chunk)
    finally:
        closed.set()
        leases.join()
    # A thread's CPU within a span never exceeds the span, but for the two clocks' granularity (thread_time and
    # perf_counter are read one after the other: seen 0.24 us apart).
    slack = 1e-4
    assert 0 < claimed[1] <= claimed[0] + slack
    assert claimed[1] < stats.db_cpu_seconds <= stats.db_seconds + slack


def test_the_bench_table_prints_db_wall_and_cpu_per_item() -> None:
    arm = ArmResult(
        name="service",
        items=10,
        failed=0,
        seconds=1.0,
        output_tokens=0,
        prompt_tokens=0,
        mean_occupancy=None,
        max_num_seqs=8,
        prep_ms_per_image=None,
        db_ms_per_item=2.5,
        db_cpu_ms_per_item=0.75,
    )
    header, _rule, row = format_table([arm]).splitlines()[:3]
    assert header.split()[-5:] == ["DB", "ms/item", "DB", "CPU", "ms/item"]
    assert row.split()[-2:] == ["2.50", "0.75"]
    assert ArmResult.failure("service", "down").db_cpu_ms_per_item is None

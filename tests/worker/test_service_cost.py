"""The service's own cost per item, as the bench reads it: a worker's writes and chunk finishes add their wall time
and the CPU they took on their own threads' clocks to its counters (``worker/samples.py``), its claims to counters
of their own, the engine samples keep both, and the bench's table prints them (``DB ms/item``, ``DB CPU ms/item``,
``claim ms/item``). Over a real database, no engine."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from sqlalchemy import select, update

from benchmarks.harness.report import format_table
from benchmarks.harness.result import ArmResult, db_figures
from tests.support.db import queued_job
from tests.support.scripted import scripted_context, scripted_runner
from vlbatch.db import job_store
from vlbatch.db.models import EngineSample, Item, ItemStatus
from worker import samples
from worker.leases import Leases
from worker.samples import FeederStats


def test_a_claim_and_a_finish_add_their_cpu_beside_their_wall_time_each_to_its_own_counters(
    db_url: str, tmp_path: Path
) -> None:
    sessions, job_id = queued_job(db_url, n=2, chunk=2)
    with sessions() as s:
        (chunk,) = job_store.chunks_of(s, job_id=job_id)
    stats, closed = FeederStats(), threading.Event()
    leases = Leases(scripted_context(sessions, scripted_runner([], []), tmp_path), stats, held=list, closed=closed)
    try:
        leased, items, _job = leases.claim(chunk)
        assert leased == chunk and len(items) == 2
        assert stats.claims == 1 and stats.db_seconds == stats.db_cpu_seconds == 0  # a claim writes no result
        claimed = (stats.claim_seconds, stats.claim_cpu_seconds)
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
    assert 0 < stats.db_cpu_seconds <= stats.db_seconds + slack
    assert (stats.claim_seconds, stats.claim_cpu_seconds) == claimed  # the finish is not a claim
    ctx = scripted_context(sessions, scripted_runner([], []), tmp_path)
    samples.sample_forever(ctx, stats, 60.0, closed)  # closed: the first sample and the last, then it returns
    with sessions() as s:
        stored = s.scalars(select(EngineSample).order_by(EngineSample.id.desc()).limit(1)).one()
    assert (stored.claims, stored.claim_seconds, stored.claim_cpu_seconds) == (1, *claimed)
    assert (stored.db_seconds, stored.db_cpu_seconds) == (stats.db_seconds, stats.db_cpu_seconds)


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
        claim_ms_per_item=1.25,
    )
    header, _rule, row = format_table([arm]).splitlines()[:3]
    assert header.split()[-7:] == ["DB", "ms/item", "DB", "CPU", "ms/item", "claim", "ms/item"]
    assert row.split()[-3:] == ["2.50", "0.75", "1.25"]
    assert ArmResult.failure("service", "down").db_cpu_ms_per_item is None


def test_an_arms_db_figures_are_its_counters_seconds_per_item_written() -> None:
    got = db_figures(4, db_s=0.01, db_cpu_s=0.002, claim_s=0.006, claim_cpu_s=0.001)
    assert got == pytest.approx(
        {"db_ms_per_item": 2.5, "db_cpu_ms_per_item": 0.5, "claim_ms_per_item": 1.5, "claim_cpu_ms_per_item": 0.25}
    )
    assert set(db_figures(0, db_s=1.0, db_cpu_s=1.0, claim_s=1.0, claim_cpu_s=1.0).values()) == {None}

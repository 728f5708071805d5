"""Service faults against real processes: the run's real worker rig (tests/support/rig.py: one Celery worker with
the vLLM CPU engine on the tiny model, a private Redis and a private PostgreSQL) has its Redis flushed and restarted
and its PostgreSQL restarted mid-job.

Every case submits a job over HTTP, injects its fault mid-job and then leaves the system alone; each checks
succeeded + failed + cancelled == total, one result row per item, no item claimed again beyond those that
were in flight at the fault, and that the job finished unattended. Each prints a ``FAULT|`` row that
``benchmarks/fault_matrix.py`` collects into the fault x outcome table.

A worker's SIGTERM drain and its SIGKILL and replacement test the lease protocol, not the engine: they run on
workers with the stub engine (tests/e2e/test_worker_faults.py). The engine core killed mid-batch is tested on the
runner (tests/engine/test_core_death.py), and an item that kills the engine every time in
tests/e2e/test_poison_item.py.
"""

from __future__ import annotations

import time

import pytest
from sqlalchemy import text

from tests.support.rig import ServiceRig, finish_and_check, in_flight, submit_photos, wait_terminal

pytestmark = [pytest.mark.engine("rig"), pytest.mark.services, pytest.mark.timeout(900)]

N_ITEMS = 48


def test_redis_flushall_mid_job(rig: ServiceRig) -> None:
    job_id, started = submit_photos(rig, "flushall", N_ITEMS)
    wait_terminal(rig, job_id, 4)
    at_fault = in_flight(rig, job_id)
    rig.redis.flushall()  # every queued message is gone; the database still knows what is left
    counts = finish_and_check(rig, "redis FLUSHALL", job_id, started, at_fault, N_ITEMS, timeout=600)
    assert counts["succeeded"] == N_ITEMS


def test_redis_restarted_mid_job(rig: ServiceRig) -> None:
    job_id, started = submit_photos(rig, "redis-restart", N_ITEMS)
    wait_terminal(rig, job_id, 4)
    at_fault = in_flight(rig, job_id)
    rig.redis.stop()  # without persistence: the queue is lost with the process
    time.sleep(3)
    rig.redis.start()
    counts = finish_and_check(rig, "redis restart", job_id, started, at_fault, N_ITEMS, timeout=600)
    assert counts["succeeded"] == N_ITEMS


def test_postgres_restarted_mid_job(rig: ServiceRig) -> None:
    job_id, started = submit_photos(rig, "pg-restart", N_ITEMS)
    wait_terminal(rig, job_id, 8)
    with rig.eng.connect() as conn:
        before = set(conn.execute(text("SELECT item_id FROM results WHERE job_id=:j"), {"j": job_id}).scalars())
    at_fault = in_flight(rig, job_id)
    rig.pg.restart()  # every connection is cut; workers and the API retry
    counts = finish_and_check(rig, "postgres restart", job_id, started, at_fault, N_ITEMS, timeout=600)
    with rig.eng.connect() as conn:
        after = set(conn.execute(text("SELECT item_id FROM results WHERE job_id=:j"), {"j": job_id}).scalars())
    assert before <= after and before, "answers written before the restart are kept"
    assert counts["succeeded"] == N_ITEMS

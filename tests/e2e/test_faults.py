"""Faults against real processes: one Celery worker with the vLLM CPU engine on the tiny model, a private
Redis and a private PostgreSQL that the tests flush, restart and kill.

Every case submits a job over HTTP, injects its fault mid-job and then leaves the system alone; each checks
succeeded + failed + cancelled == total, one result row per item, no item claimed again beyond those that
were in flight at the fault, and that the job finished unattended. The cases share one worker (an engine
load costs a minute here) and run in file order; each prints a ``FAULT|`` row that
``benchmarks/fault_matrix.py`` collects into the fault x outcome table.

The engine core killed mid-batch is tested on the runner alone (tests/engine/test_core_death.py), and an item
that kills the engine every time in tests/e2e/test_poison_item_engine.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from PIL import Image
from sqlalchemy import Engine, create_engine, text

from api.main import create_app
from tests.support.engine import child_env
from tests.support.services import PrivatePostgres, PrivateRedis
from vlbatch.settings import Settings

pytestmark = [pytest.mark.engine, pytest.mark.services, pytest.mark.timeout(900)]

N_ITEMS = 48
LEASE_S = 20
DRAIN_S = 10


@dataclass
class Rig:
    root: Path
    db: str
    eng: Engine
    redis: PrivateRedis
    pg: PrivatePostgres
    env: dict[str, str]
    log: Path
    client: httpx.Client
    worker: subprocess.Popen[bytes]


def _photos(folder: Path, n: int) -> None:
    folder.mkdir(parents=True)
    for i in range(n):
        Image.new("RGB", (64 + (i % 4) * 24, 48), ((i * 37) % 256, (i * 11) % 256, 90)).save(folder / f"p{i:03d}.jpg")


def _start_worker(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", "from cli.main import main; main()", "worker"],
        env=env,
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)


@pytest.fixture(scope="module")
def services() -> Iterator[tuple[PrivateRedis, PrivatePostgres]]:
    # Under /tmp, not pytest's folder: the postgres user (initdb refuses root) cannot enter root's 0700 one.
    pg_root = Path(tempfile.mkdtemp(prefix="vlbatch-faults-pg-"))
    redis, pg = PrivateRedis(), PrivatePostgres(pg_root)
    try:
        redis.start()
        pg.init()
        pg.start()
        yield redis, pg
    finally:
        redis.stop()
        with contextlib.suppress(subprocess.SubprocessError):
            pg.stop()
        shutil.rmtree(pg_root, ignore_errors=True)


@pytest.fixture(scope="module")
def rig(
    tmp_path_factory: pytest.TempPathFactory, tiny_model: Path, services: tuple[PrivateRedis, PrivatePostgres]
) -> Iterator[Rig]:
    from tests.conftest import LiveServer, make_key

    base = tmp_path_factory.mktemp("faults")
    redis, pg = services
    root = base / "albums"
    root.mkdir()
    env = child_env()
    env.update(
        {
            "VLBATCH_DATABASE_URL": pg.url,
            "VLBATCH_BROKER_URL": redis.url,
            "VLBATCH_MODEL_PATH": str(tiny_model),
            "VLBATCH_MODEL_NAME": "tiny",
            "VLBATCH_ALLOWED_INPUT_ROOTS": str(root),
            "VLBATCH_LEASE_SECONDS": str(LEASE_S),
            "VLBATCH_RECONCILE_INTERVAL_S": "2",
            "VLBATCH_UNCLAIMED_RESEND_S": "5",
            "VLBATCH_DRAIN_TIMEOUT_S": str(DRAIN_S),
            "VLBATCH_ENGINE": json.dumps(
                {
                    "dtype": "float32",
                    "max_model_len": 2048,
                    "kv_cache_memory_bytes": 256 << 20,
                    "enforce_eager": True,
                    "max_num_seqs": 16,
                }
            ),
        }
    )
    settings = Settings(
        database_url=pg.url,
        broker_url=redis.url,
        model_name="tiny",
        chunk_size=4,
        allowed_input_roots=[root],
        reconcile_interval_s=2,
        unclaimed_resend_s=5,
    )
    log = base / "worker.log"
    eng = create_engine(pg.url, pool_pre_ping=True)
    with LiveServer(create_app(settings)) as srv:
        headers = {"Authorization": f"Bearer {make_key(pg.url)}"}
        with httpx.Client(base_url=srv.url, timeout=30, headers=headers) as client:
            worker = _start_worker(env, log)
            r = Rig(root, pg.url, eng, redis, pg, env, log, client, worker)
            try:
                yield r
            finally:
                _kill_group(r.worker)
                eng.dispose()


def _submit(rig: Rig, name: str) -> tuple[str, float]:
    folder = rig.root / name
    _photos(folder, N_ITEMS)
    job = rig.client.post("/v1/jobs/tagging", json={"directory": str(folder), "options": {"max_tags": 3}}).json()
    assert job["total"] == N_ITEMS, job
    return job["id"], time.monotonic()


def _get(rig: Rig, job_id: str) -> dict[str, object]:
    for _ in range(60):  # the API's database may be restarting
        try:
            resp = rig.client.get(f"/v1/jobs/{job_id}")
            if resp.status_code == 200:
                body: dict[str, object] = resp.json()
                return body
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise AssertionError("the API did not answer for a minute")


def _terminal(rig: Rig, job_id: str) -> int:
    counts = _get(rig, job_id)["counts"]
    assert isinstance(counts, dict)
    return int(counts.get("succeeded", 0)) + int(counts.get("failed", 0)) + int(counts.get("cancelled", 0))


def _wait_terminal(rig: Rig, job_id: str, at_least: int, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while _terminal(rig, job_id) < at_least:
        assert rig.worker.poll() is None, rig.log.read_text()[-3000:]
        assert time.monotonic() < deadline, rig.log.read_text()[-3000:]
        time.sleep(0.3)


def _in_flight(rig: Rig, job_id: str) -> int:
    with rig.eng.connect() as conn:
        return int(
            conn.execute(
                text("SELECT count(*) FROM items WHERE job_id=:j AND status='running'"), {"j": job_id}
            ).scalar_one()
        )


def _finish_and_check(rig: Rig, fault: str, job_id: str, started: float, in_flight: int) -> dict[str, int]:
    deadline = time.monotonic() + 600
    while _get(rig, job_id)["status"] != "finished":
        assert rig.worker.poll() is None, rig.log.read_text()[-3000:]
        assert time.monotonic() < deadline, rig.log.read_text()[-3000:]
        time.sleep(0.5)
    took = time.monotonic() - started
    counts = _get(rig, job_id)["counts"]
    assert isinstance(counts, dict)
    with rig.eng.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT i.id, count(r.item_id), i.attempts FROM items i LEFT JOIN results r ON r.item_id = i.id "
                "WHERE i.job_id=:j GROUP BY i.id, i.attempts"
            ),
            {"j": job_id},
        ).all()
    s, f, c = (int(counts.get(k, 0)) for k in ("succeeded", "failed", "cancelled"))
    assert s + f + c == N_ITEMS, counts
    assert len(rows) == N_ITEMS and all(n == 1 for _, n, _ in rows), "one result row per item"
    claimed_again = sum(1 for _, _, attempts in rows if attempts > 1)
    assert claimed_again <= in_flight, f"{claimed_again} items claimed again, {in_flight} were in flight"
    print(f"FAULT|{fault}|{N_ITEMS}|{s}|{f}|{c}|{claimed_again}|{in_flight}|{took:.1f}")
    return {"succeeded": s, "failed": f, "cancelled": c}


def test_redis_flushall_mid_job(rig: Rig) -> None:
    job_id, started = _submit(rig, "flushall")
    _wait_terminal(rig, job_id, 4)
    in_flight = _in_flight(rig, job_id)
    rig.redis.flushall()  # every queued message is gone; the database still knows what is left
    counts = _finish_and_check(rig, "redis FLUSHALL", job_id, started, in_flight)
    assert counts["succeeded"] == N_ITEMS


def test_redis_restarted_mid_job(rig: Rig) -> None:
    job_id, started = _submit(rig, "redis-restart")
    _wait_terminal(rig, job_id, 4)
    in_flight = _in_flight(rig, job_id)
    rig.redis.stop()  # without persistence: the queue is lost with the process
    time.sleep(3)
    rig.redis.start()
    counts = _finish_and_check(rig, "redis restart", job_id, started, in_flight)
    assert counts["succeeded"] == N_ITEMS


def test_postgres_restarted_mid_job(rig: Rig) -> None:
    job_id, started = _submit(rig, "pg-restart")
    _wait_terminal(rig, job_id, 8)
    with rig.eng.connect() as conn:
        before = set(conn.execute(text("SELECT item_id FROM results WHERE job_id=:j"), {"j": job_id}).scalars())
    in_flight = _in_flight(rig, job_id)
    rig.pg.restart()  # every connection is cut; workers and the API retry
    counts = _finish_and_check(rig, "postgres restart", job_id, started, in_flight)
    with rig.eng.connect() as conn:
        after = set(conn.execute(text("SELECT item_id FROM results WHERE job_id=:j"), {"j": job_id}).scalars())
    assert before <= after and before, "answers written before the restart are kept"
    assert counts["succeeded"] == N_ITEMS


def test_sigterm_drains_or_releases_within_bound(rig: Rig) -> None:
    job_id, started = _submit(rig, "sigterm")
    _wait_terminal(rig, job_id, 4)
    in_flight = _in_flight(rig, job_id)
    sent = time.monotonic()
    os.killpg(rig.worker.pid, signal.SIGTERM)
    held_sql = text("SELECT count(*) FROM chunks WHERE job_id=:j AND NOT done AND lease_owner IS NOT NULL")
    deadline = sent + DRAIN_S + 30  # drain, then hand back: the leases are free within this
    while True:
        with rig.eng.connect() as conn:
            held = conn.execute(held_sql, {"j": job_id}).scalar_one()
        if held == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    released_in = time.monotonic() - sent
    assert held == 0, f"{held} chunks still leased {released_in:.0f} s after SIGTERM; " + rig.log.read_text()[-3000:]
    try:  # the engine's own shutdown follows; a supervisor's kill ends it if it lingers
        rig.worker.wait(120)
    except subprocess.TimeoutExpired:
        _kill_group(rig.worker)
    exited_in = time.monotonic() - sent
    with rig.eng.connect() as conn:  # and it took no new lease on its way out
        assert conn.execute(held_sql, {"j": job_id}).scalar_one() == 0
    rig.worker = _start_worker(rig.env, rig.log)  # the replacement finishes the job unattended
    fault = f"worker SIGTERM (leases free in {released_in:.0f} s, exited in {exited_in:.0f} s)"
    counts = _finish_and_check(rig, fault, job_id, started, in_flight)
    assert counts["succeeded"] == N_ITEMS, "the shutdown failed no item"

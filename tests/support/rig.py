"""Real worker processes for the service scenarios, and the one real worker rig a test run shares.

``service_rig`` (session-scoped; tests take it as ``rig``) is a private Redis and a private PostgreSQL
(``services.py``), the API on a loopback port over them, and one real ``vlbatch worker`` with the vLLM CPU engine on
the tiny model with no engine settings (what the worker decides on this host), logging to a file. The Redis FLUSHALL
and restart and the PostgreSQL restart faults, the OpenAI client's batches and the tagging job with corrupt inputs all
run on it, each with jobs of its own; the worker is never killed, so the rig is one engine load per run. It is
stopped after the last test that uses it, so its engine does not sit in memory beside the engines of later tests.

Faults whose subject is the lease, drain and reconcile protocol (SIGTERM, SIGKILL and a replacement) run on
``vlbatch worker`` processes with the stub engine instead (``worker_env`` with ``STUB_ENGINE``), engine-free: each
serves its own model name, so its own queue.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from PIL import Image
from sqlalchemy import Engine, create_engine, text

from tests.support.engine import child_env
from tests.support.services import PrivatePostgres, PrivateRedis, cluster_root

RIG_MODEL = "tiny"  # the name the rig's worker serves: its queue
LEASE_S = 20
DRAIN_S = 10
ROOT = Path(__file__).resolve().parents[2]


def photos(folder: Path, n: int) -> None:
    """``n`` small JPEGs of a few sizes and colours, each its own bytes."""
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        Image.new("RGB", (64 + (i % 4) * 24, 48), ((i * 37) % 256, (i * 11) % 256, 90)).save(folder / f"p{i:03d}.jpg")


def worker_env(
    *,
    database_url: str,
    broker_url: str,
    model_dir: Path,
    model_name: str,
    root: Path,
    engine: dict[str, Any] | None,
    **extra: str,
) -> dict[str, str]:
    """A ``vlbatch worker``'s environment: its services, the model it serves under ``model_name`` (its queue), the
    input root, the engine configuration (none: the worker decides it, as with no ``VLBATCH_ENGINE``), then
    ``extra`` settings (``VLBATCH_`` names)."""
    env = child_env(
        VLBATCH_DATABASE_URL=database_url,
        VLBATCH_BROKER_URL=broker_url,
        VLBATCH_MODEL_PATH=str(model_dir),
        VLBATCH_MODEL_NAME=model_name,
        VLBATCH_ALLOWED_INPUT_ROOTS=str(root),
    )
    if engine is not None:
        env["VLBATCH_ENGINE"] = json.dumps(engine)
    env.update(extra)
    return env


def start_worker(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """``vlbatch worker`` in its own process group (a kill reaches its engine's processes too)."""
    return subprocess.Popen(
        [sys.executable, "-c", "from cli.main import main; main()", "worker"],
        env=env,
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
        cwd=ROOT,
    )


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)


def stop_worker(proc: subprocess.Popen[bytes]) -> None:
    """Cleanup, not under test: a warm Celery shutdown plus the engine's can outlast a minute on a loaded 2-core
    machine, so the process group is killed if SIGTERM has not ended it."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(90)
    except subprocess.TimeoutExpired:
        kill_group(proc)


@contextlib.contextmanager
def private_services() -> Iterator[tuple[PrivateRedis, PrivatePostgres]]:
    """A Redis server and a PostgreSQL cluster of this caller's own, on free ports, removed afterwards."""
    pg_root = cluster_root("vlbatch-rig-pg-")
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


@dataclass
class ServiceRig:
    root: Path  # the input root: each test makes its own folder under it
    redis: PrivateRedis
    pg: PrivatePostgres
    eng: Engine
    env: dict[str, str]
    log: Path
    api_url: str
    client: httpx.Client  # the default tenant's key
    worker: subprocess.Popen[bytes] | None
    model: str = RIG_MODEL
    keys: dict[str, str] = field(default_factory=dict)

    @property
    def db(self) -> str:
        return self.pg.url

    def key(self, tenant: str) -> str:
        """An API key of ``tenant`` (made once per rig)."""
        if tenant not in self.keys:
            from tests.conftest import make_key

            self.keys[tenant] = make_key(self.db, tenant=tenant)
        return self.keys[tenant]

    def log_tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:]

    def stacks(self) -> str:
        """The worker's log after asking it for every thread's stack (Celery logs them on SIGUSR1): what a
        worker that stopped making progress was doing, for a failure message."""
        if self.worker is not None and self.worker.poll() is None:
            os.kill(self.worker.pid, signal.SIGUSR1)
            time.sleep(3)
        return self.log_tail(30000)

    def alive(self) -> None:
        """Fail with the worker's log when the worker has died (it is never killed on purpose)."""
        assert self.worker is not None, "the rig's worker was stopped after its last test"
        assert self.worker.poll() is None, self.log_tail()

    def items(self, job_id: str) -> list[tuple[int, int, int, str, str | None]]:
        """(item id, result rows, attempts, status, error code) of every item of the job."""
        with self.eng.connect() as conn:
            rows = conn.execute(
                text(
                    "SELECT i.id, count(r.item_id), i.attempts, i.status, i.error_code FROM items i "
                    "LEFT JOIN results r ON r.item_id = i.id WHERE i.job_id=:j "
                    "GROUP BY i.id, i.attempts, i.status, i.error_code"
                ),
                {"j": job_id},
            ).all()
        return [(int(a), int(b), int(c), str(d), e) for a, b, c, d, e in rows]

    def stop_worker(self) -> None:
        if self.worker is not None:
            stop_worker(self.worker)
            self.worker = None


@contextlib.contextmanager
def worker_rig(
    base: Path,
    *,
    model_dir: Path,
    model_name: str,
    engine: dict[str, Any] | None,
    chunk_size: int = 4,
    **worker: str,
) -> Iterator[ServiceRig]:
    """Private Redis and PostgreSQL, the API over them (chunks of ``chunk_size``) and one ``vlbatch worker`` serving
    ``model_dir`` as ``model_name`` with ``engine``; ``worker`` adds settings to the worker's (``VLBATCH_`` names).
    Inputs go under ``base``/inputs."""
    from api.main import create_app
    from tests.conftest import LiveServer, make_key
    from vlbatch.settings import Settings

    root = base / "inputs"
    root.mkdir(parents=True)
    with private_services() as (redis, pg):
        timing = {
            "VLBATCH_LEASE_SECONDS": str(LEASE_S),
            "VLBATCH_RECONCILE_INTERVAL_S": "2",
            "VLBATCH_UNCLAIMED_RESEND_S": "5",
            "VLBATCH_DRAIN_TIMEOUT_S": str(DRAIN_S),
        }
        env = worker_env(
            database_url=pg.url,
            broker_url=redis.url,
            model_dir=model_dir,
            model_name=model_name,
            root=root,
            engine=engine,
            **{**timing, **worker},
        )
        settings = Settings(
            database_url=pg.url,
            broker_url=redis.url,
            model_name=model_name,
            chunk_size=chunk_size,
            allowed_input_roots=[root],
            data_dir=base / "api-data",
            reconcile_interval_s=2,
            unclaimed_resend_s=5,
        )
        log = base / "worker.log"
        eng = create_engine(pg.url, pool_pre_ping=True)
        with LiveServer(create_app(settings)) as srv:
            headers = {"Authorization": f"Bearer {make_key(pg.url)}"}
            with httpx.Client(base_url=srv.url, timeout=30, headers=headers) as client:
                rig = ServiceRig(root, redis, pg, eng, env, log, srv.url, client, start_worker(env, log), model_name)
                try:
                    yield rig
                finally:
                    if rig.worker is not None:
                        kill_group(rig.worker)
                    eng.dispose()


@pytest.fixture(scope="session")
def service_rig(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Iterator[ServiceRig]:
    """The run's one real worker rig: the tiny model on the vLLM CPU engine, one engine load. Its worker has no
    engine settings, as a newcomer starts one: what it runs with is what ``vlbatch worker`` decides on this host
    (``engine.planning.host_fit``), so the rig's load is also the proof that those defaults start here."""
    with worker_rig(tmp_path_factory.mktemp("rig"), model_dir=tiny_model, model_name=RIG_MODEL, engine=None) as rig:
        yield rig


@pytest.fixture
def rig(service_rig: ServiceRig, request: pytest.FixtureRequest) -> Iterator[ServiceRig]:
    """The run's service rig; after the last test of the run that takes it, its worker (and engine) is stopped."""
    service_rig.alive()
    yield service_rig
    items = request.session.items
    later = items[items.index(request.node) + 1 :] if request.node in items else [request.node]
    if not any("rig" in getattr(item, "fixturenames", ()) for item in later):
        service_rig.stop_worker()


def wait_until(
    check: Any, what: str | Callable[[], str], *, timeout: float, alive: Any = None, poll: float = 0.3
) -> Any:
    """Poll ``check`` until it returns a true value; ``alive`` (if given) is called each round and may fail.
    ``what`` may be a callable, read only on failure: a log tail taken then, not when the wait began."""
    deadline = time.monotonic() + timeout
    while not (got := check()):
        if alive is not None:
            alive()
        if time.monotonic() >= deadline:
            raise AssertionError(what() if callable(what) else what)
        time.sleep(poll)
    return got


def submit_photos(rig: ServiceRig, name: str, n: int, **options: Any) -> tuple[str, float]:
    """A tagging job over ``n`` new photos in the folder ``name``: its id and when it was submitted."""
    folder = rig.root / name
    photos(folder, n)
    job = rig.client.post("/v1/jobs/tagging", json={"directory": str(folder), "options": {"max_tags": 3, **options}})
    assert job.status_code in (200, 201, 202), job.text
    assert job.json()["total"] == n, job.text
    return str(job.json()["id"]), time.monotonic()


def get_job(rig: ServiceRig, job_id: str) -> dict[str, Any]:
    for _ in range(60):  # the API's database may be restarting
        with contextlib.suppress(httpx.HTTPError):
            resp = rig.client.get(f"/v1/jobs/{job_id}")
            if resp.status_code == 200:
                body: dict[str, Any] = resp.json()
                return body
        time.sleep(1)
    raise AssertionError("the API did not answer for a minute")


def terminal(rig: ServiceRig, job_id: str) -> int:
    counts = get_job(rig, job_id)["counts"]
    return sum(int(counts.get(k, 0)) for k in ("succeeded", "failed", "cancelled"))


def wait_terminal(rig: ServiceRig, job_id: str, at_least: int, timeout: float = 600) -> None:
    wait_until(
        lambda: terminal(rig, job_id) >= at_least,
        f"fewer than {at_least} items of {job_id} ended",
        timeout=timeout,
        alive=rig.alive,
    )


def in_flight(rig: ServiceRig, job_id: str) -> int:
    with rig.eng.connect() as conn:
        sql = text("SELECT count(*) FROM items WHERE job_id=:j AND status='running'")
        return int(conn.execute(sql, {"j": job_id}).scalar_one())


def finish_and_check(
    rig: ServiceRig,
    fault: str,
    job_id: str,
    started: float,
    in_flight_at_fault: int,
    total: int,
    *,
    timeout: float = 420,
) -> dict[str, int]:
    """Wait for the job to finish unattended, check every item ended once with one result row and no item was
    claimed again beyond those in flight at the fault, and print the ``FAULT|`` row benchmarks/fault_matrix.py
    collects."""
    wait_until(
        lambda: get_job(rig, job_id)["status"] == "finished",
        lambda: f"job {job_id} did not finish in {timeout:.0f} s: {get_job(rig, job_id)['counts']}\n{rig.stacks()}",
        timeout=timeout,
        alive=rig.alive,
        poll=0.5,
    )
    took = time.monotonic() - started
    counts = get_job(rig, job_id)["counts"]
    rows = rig.items(job_id)
    s, f, c = (int(counts.get(k, 0)) for k in ("succeeded", "failed", "cancelled"))
    assert s + f + c == total, counts
    assert len(rows) == total and all(n == 1 for _, n, _, _, _ in rows), "one result row per item"
    claimed_again = sum(1 for _, _, attempts, _, _ in rows if attempts > 1)
    assert claimed_again <= in_flight_at_fault, f"{claimed_again} items claimed again, {in_flight_at_fault} in flight"
    print(f"FAULT|{fault}|{total}|{s}|{f}|{c}|{claimed_again}|{in_flight_at_fault}|{took:.1f}")
    return {"succeeded": s, "failed": f, "cancelled": c}

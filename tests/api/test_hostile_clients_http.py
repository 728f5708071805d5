"""The API against clients that send too much, race each other or poke ended jobs, and against a broker that
hangs: over real HTTP on SQLite and PostgreSQL."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from sqlalchemy import func, select, update

from api.main import create_app
from vlbatch.db.models import Job, JobStatus
from vlbatch.db.session import make_engine, make_sessionmaker
from vlbatch.settings import Settings

pytestmark = pytest.mark.timeout(120)

LIMIT = 64 * 1024


def _jobs_in(db_url: str) -> int:
    engine = make_engine(db_url)
    with make_sessionmaker(engine)() as s:
        n = int(s.scalar(select(func.count()).select_from(Job)) or 0)
    engine.dispose()
    return n


def _client(settings: Settings, serve: type, api_key: type) -> Iterator[httpx.Client]:
    headers = api_key.header(api_key.make(settings.database.database_url))
    with serve(create_app(settings)) as srv, httpx.Client(base_url=srv.url, timeout=30, headers=headers) as client:
        yield client


@pytest.fixture
def client(db_url: str, redis_url: str, tmp_path: Path, serve: type, api_key: type) -> Iterator[httpx.Client]:
    settings = Settings(database_url=db_url, broker_url=redis_url, model_name="tiny", max_request_bytes=LIMIT)
    yield from _client(settings, serve, api_key)


def test_a_declared_oversize_body_is_refused_before_it_is_read(client: httpx.Client, db_url: str) -> None:
    body = b'{"items": [' + b'{"images": ["/a.jpg"]},' * (LIMIT // 10) + b'{"images": ["/a.jpg"]}]}'
    r = client.post("/v1/jobs/tagging", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 413
    assert r.json()["code"] == "request_too_large" and "VLBATCH_MAX_REQUEST_BYTES" in r.json()["detail"]
    assert _jobs_in(db_url) == 0


def test_a_chunked_oversize_body_is_cut_off_while_it_streams(client: httpx.Client, db_url: str) -> None:
    sent = 0

    def endless() -> Iterator[bytes]:
        # Far more than the limit: the API must answer before it has all of it, or not at all.
        nonlocal sent
        yield b'{"items": ['
        for _ in range(10_000):
            sent += 1024
            yield b'{"images": ["/a.jpg"]},' * 44

    r = client.post("/v1/jobs/tagging", content=endless(), headers={"Content-Type": "application/json"})
    assert r.status_code == 413 and r.json()["code"] == "request_too_large"
    assert "Content-Length" not in r.request.headers
    assert _jobs_in(db_url) == 0


def test_a_small_body_still_goes_through(client: httpx.Client) -> None:
    r = client.post("/v1/jobs/tagging", json={"items": [{"images": ["/a.jpg"]}]})
    assert r.status_code == 201, r.text


@pytest.mark.parametrize("cursor", [str(2**64), str(-(2**70)), "1" * 150, "x"])
def test_a_cursor_out_of_range_is_a_422(client: httpx.Client, cursor: str) -> None:
    job = client.post("/v1/jobs/tagging", json={"items": [{"images": ["/a.jpg"]}]}).json()
    for route, route_cursor in (("items", cursor), ("results", f"w:{cursor}")):
        r = client.get(f"/v1/jobs/{job['id']}/{route}", params={"cursor": route_cursor})
        assert r.status_code == 422 and r.json()["code"] == "bad_cursor", r.text


@pytest.mark.parametrize("cursor", ["3", "seq:3", "w", "w:", "w:-2"])
def test_a_results_cursor_that_is_not_a_write_position_is_a_422(client: httpx.Client, cursor: str) -> None:
    job = client.post("/v1/jobs/tagging", json={"items": [{"images": ["/a.jpg"]}]}).json()
    r = client.get(f"/v1/jobs/{job['id']}/results", params={"cursor": cursor})
    assert r.status_code == 422 and r.json()["code"] == "bad_cursor", r.text
    fresh = client.get(f"/v1/jobs/{job['id']}/results").json()
    assert fresh == {"data": [], "next_cursor": None, "resume_cursor": "w:-1"}


@pytest.mark.parametrize("ended", [JobStatus.FINISHED, JobStatus.CANCELLED])
def test_an_ended_job_cannot_be_cancelled(client: httpx.Client, db_url: str, ended: JobStatus) -> None:
    job = client.post("/v1/jobs/tagging", json={"items": [{"images": ["/a.jpg"]}]}).json()
    engine = make_engine(db_url)
    with make_sessionmaker(engine)() as s:
        s.execute(update(Job).where(Job.id == job["id"]).values(status=ended, finished_at=None))
        s.commit()
    engine.dispose()
    r = client.post(f"/v1/jobs/{job['id']}/cancel")
    assert r.status_code == 409 and r.json()["code"] == "job_state_conflict", r.text
    after = client.get(f"/v1/jobs/{job['id']}").json()
    assert after["status"] == ended and after["finished_at"] is None


def test_concurrent_creates_with_one_key_make_one_job_and_no_500(client: httpx.Client, db_url: str) -> None:
    body = {"items": [{"images": [f"/a{i}.jpg"]} for i in range(50)]}

    def create(_: int) -> httpx.Response:
        return client.post("/v1/jobs/tagging", json=body, headers={"Idempotency-Key": "same-key"})

    with ThreadPoolExecutor(20) as pool:
        answers = list(pool.map(create, range(20)))
    assert sorted({r.status_code for r in answers}) == [201], [r.text for r in answers if r.status_code != 201]
    assert len({r.json()["id"] for r in answers}) == 1
    assert _jobs_in(db_url) == 1


class _SilentBroker:
    """A port that accepts connections and never answers: a hung broker."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.held: list[socket.socket] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(conn)

    def close(self) -> None:
        self.sock.close()
        for c in self.held:
            c.close()


def test_a_hung_broker_does_not_hang_creates_or_reads(db_url: str, tmp_path: Path, serve: type, api_key: type) -> None:
    broker = _SilentBroker()
    try:
        settings = Settings(
            database_url=db_url, broker_url=f"redis://127.0.0.1:{broker.port}/0", model_name="tiny", api_reconcile=False
        )
        for client in _client(settings, serve, api_key):
            started = time.monotonic()
            r = client.post("/v1/jobs/tagging", json={"items": [{"images": ["/a.jpg"]}]})
            took = time.monotonic() - started
            assert r.status_code == 201, r.text
            assert took < 15, f"a create took {took:.1f}s with the broker hung"
            # The job is in the DB (the truth), not enqueued: the reconciler sends it later.
            assert client.get(f"/v1/jobs/{r.json()['id']}").json()["counts"]["queued"] == 1
            assert client.get("/healthz", timeout=5).status_code == 200
    finally:
        broker.close()


def test_a_burst_of_creates_beyond_the_connection_pool_all_answer(client: httpx.Client, db_url: str) -> None:
    """More concurrent creates than the API has DB connections and route threads: a finished route must give its
    connection back before its answer waits for a thread, or every thread waits for a connection held by an answer
    waiting for a thread, until the pool times out with 500s."""
    burst = 80  # above the pool (15 connections) and the route threads (40)

    def create(i: int) -> httpx.Response:
        return client.post("/v1/jobs/tagging", json={"items": [{"images": [f"/burst/{i}.jpg"]}]}, timeout=25)

    with ThreadPoolExecutor(burst) as pool:
        answers = list(pool.map(create, range(burst)))
    assert [r.status_code for r in answers] == [201] * burst, [r.text[:200] for r in answers if r.status_code != 201]
    assert _jobs_in(db_url) == burst

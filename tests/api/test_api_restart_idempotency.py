"""The API process killed during a 100,000-item submission: a retry with the same Idempotency-Key, once the
API is back, gives exactly one job holding every item (the killed request left nothing half-made)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, text

from tests.conftest import bearer, make_key
from tests.support.engine import child_env
from tests.support.services import PrivateRedis, free_port

pytestmark = [pytest.mark.services, pytest.mark.timeout(600)]

N = 100_000


def _api(env: dict[str, str], port: int, log: Path) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, "-c", "from cli.main import main; main()", "api", "--port", str(port)],
        env=env,
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while True:
        try:
            httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
            return proc
        except httpx.HTTPError:
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.2)


def test_api_killed_mid_submission_then_retry_gives_one_job(empty_pg_url: str, tmp_path: Path) -> None:
    root = tmp_path / "big"
    root.mkdir()
    for i in range(N):  # empty files: the API lists and inserts them; no worker runs
        (root / f"{i:06d}.jpg").touch()
    redis = PrivateRedis()
    redis.start()
    try:
        key = make_key(empty_pg_url)
        env = child_env()
        env.update(
            {
                "VLBATCH_DATABASE_URL": empty_pg_url,
                "VLBATCH_BROKER_URL": redis.url,
                "VLBATCH_ALLOWED_INPUT_ROOTS": str(root),
                "VLBATCH_MODEL_NAME": "tiny",
            }
        )
        port, log = free_port(), tmp_path / "api.log"
        url = f"http://127.0.0.1:{port}/v1/jobs/tagging"
        headers = {**bearer(key), "Idempotency-Key": "big-import-1"}
        body = {"directory": str(root)}
        api = _api(env, port, log)
        first: dict[str, object] = {}

        def submit() -> None:
            try:
                first["status"] = httpx.post(url, json=body, headers=headers, timeout=300).status_code
            except httpx.HTTPError as exc:
                first["error"] = type(exc).__name__

        try:
            t = threading.Thread(target=submit)
            t.start()
            time.sleep(1.0)  # the request is being served (listing and inserting 100k items takes longer)
            os.killpg(api.pid, signal.SIGKILL)
            api.wait(30)
            t.join(30)
            api = _api(env, port, log)
            retry = httpx.post(url, json=body, headers=headers, timeout=300)
            assert retry.status_code in (200, 201), retry.text
            job = retry.json()
            again = httpx.post(url, json=body, headers=headers, timeout=300).json()
            assert again["id"] == job["id"]
        finally:
            os.killpg(api.pid, signal.SIGKILL)
            api.wait(30)
    finally:
        redis.stop()
    eng = create_engine(empty_pg_url)
    with eng.connect() as conn:
        jobs = conn.execute(text("SELECT id, total FROM jobs")).all()
        items = conn.execute(text("SELECT count(*) FROM items")).scalar_one()
    eng.dispose()
    assert "error" in first, f"the first request finished before the kill ({first}); the test proves nothing"
    assert [j.id for j in jobs] == [job["id"]] and job["total"] == N
    assert items == N  # the killed request left no half-made job behind

"""HTTP -> Redis -> a real Celery worker process -> the vLLM CPU engine -> PostgreSQL.

One test, one tiny generated model: a 220-item job with corrupt inputs, the worker SIGKILLed mid-job
and replaced; every item must end in exactly one terminal state with exactly one result row.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest
from PIL import Image
from sqlalchemy import create_engine, text

from api.main import create_app
from tests.support.engine import child_env
from vlbatch.settings import Settings

pytestmark = [pytest.mark.engine, pytest.mark.services, pytest.mark.timeout(1500)]

N_GOOD, N_BAD = 200, 20


def _photos(root: Path) -> None:
    for i in range(N_GOOD):
        img = Image.new("RGB", (64 + (i % 5) * 40, 48 + (i % 3) * 30), ((i * 37) % 256, (i * 11) % 256, 90))
        img.save(root / f"p{i:04d}.jpg", quality=80)
    good = (root / "p0000.jpg").read_bytes()
    for i in range(N_BAD):
        kind = i % 4
        data = [b"", b"not an image at all", good[: len(good) // 3], os.urandom(500)][kind]
        (root / f"z{i:04d}.jpg").write_bytes(data)


def _worker(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", "from cli.main import main; main()", "worker"],
        env=env,
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Cleanup, not under test: a warm Celery shutdown plus the engine's can outlast a minute on a loaded
    2-core machine (seen once in CI), so the process group is killed if SIGTERM has not ended it."""
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(90)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)


def _counts(client: httpx.Client, job_id: str) -> dict[str, int]:
    counts: dict[str, int] = client.get(f"/v1/jobs/{job_id}").json()["counts"]
    return counts


def test_job_survives_sigkill_and_accounts_for_every_item(
    empty_pg_url: str, redis_url: str, tmp_path: Path, serve: type, tiny_model: Path, api_key: type
) -> None:
    import redis

    redis.Redis.from_url(redis_url).flushdb()
    root = tmp_path / "album"
    root.mkdir()
    _photos(root)
    db = empty_pg_url
    eng = create_engine(db)
    settings = Settings(
        database_url=db, broker_url=redis_url, model_name="tiny", chunk_size=8, allowed_input_roots=[root]
    )
    env = child_env()
    env.update(
        {
            "VLBATCH_DATABASE_URL": db,
            "VLBATCH_BROKER_URL": redis_url,
            "VLBATCH_MODEL_PATH": str(tiny_model),
            "VLBATCH_MODEL_NAME": "tiny",
            "VLBATCH_ALLOWED_INPUT_ROOTS": str(root),
            "VLBATCH_LEASE_SECONDS": "15",
            "VLBATCH_RECONCILE_INTERVAL_S": "3",
            "VLBATCH_ENGINE": json.dumps(
                {
                    "dtype": "float32",
                    "max_model_len": 2048,
                    "kv_cache_memory_bytes": 256 << 20,
                    "enforce_eager": True,
                    "max_num_seqs": 32,
                }
            ),
        }
    )
    log = tmp_path / "worker.log"
    headers = api_key.header(api_key.make(db))
    with serve(create_app(settings)) as srv, httpx.Client(base_url=srv.url, timeout=30, headers=headers) as client:
        job = client.post(
            "/v1/jobs/tagging", json={"directory": str(root), "options": {"max_tags": 3, "max_tag_chars": 12}}
        ).json()
        assert job["total"] == N_GOOD + N_BAD
        first = _worker(env, log)
        deadline = time.monotonic() + 600
        while _counts(client, job["id"])["succeeded"] < 40:
            assert first.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.5)
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(30)
        mid = _counts(client, job["id"])
        assert mid["succeeded"] + mid["failed"] < job["total"], "job finished before the kill; test proves nothing"
        second = _worker(env, log)
        try:
            deadline = time.monotonic() + 900
            while client.get(f"/v1/jobs/{job['id']}").json()["status"] != "finished":
                assert second.poll() is None, log.read_text()[-3000:]
                assert time.monotonic() < deadline, log.read_text()[-3000:]
                time.sleep(1)
        finally:
            _stop(second)
        counts = _counts(client, job["id"])
        with eng.connect() as conn:
            per_item = conn.execute(text("SELECT item_id, count(*) FROM results GROUP BY item_id")).all()
            failures = conn.execute(
                text("SELECT ref, error_code, error_message FROM items WHERE status='failed'")
            ).all()
        codes = Counter(code for _, code, _ in failures)
        assert counts["succeeded"] + counts["failed"] == job["total"]
        assert counts["failed"] == N_BAD, [f for f in failures if not Path(f[0]).name.startswith("z")][:5]
        assert len(per_item) == job["total"] and all(n == 1 for _, n in per_item)
        assert set(codes) <= {"decode_error", "empty_file"}, codes
        lines = client.get(f"/v1/jobs/{job['id']}/results.jsonl").text.splitlines()
        ok = [json.loads(x) for x in lines if json.loads(x)["status"] == "succeeded"]
        assert len(ok) == N_GOOD and all(len(r["output"]["tags"]) <= 3 for r in ok)
        assert all(r["model"] == "tiny" and r["prompt_tokens"] > 0 for r in ok)
    eng.dispose()

"""A deployment broken for every request, on the real CPU engine: the canary finds it, nothing is claimed.

``vlbatch tag`` runs the tiny model whose engine carries a test-only logits processor
(tests/support/poison_logits.py) that SIGKILLs the engine core process as soon as any request joins the batch,
as vllm-ascend #12086 does to every image on 310P. The canary after the load crashes, the breaker opens, the
engine is reloaded after the back-off and crashes on the canary again: the run stops with a non-zero exit and
``engine_canary_failed``, after two engine loads, with every item still queued and never claimed. The API on the
same database then answers /readyz with 503 and the reason, and the job with ``stalled``.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from api.main import create_app
from cli.demo import write_sample_photos
from tests.support.engine import TEST_ENGINE, child_env
from vlbatch.settings import Settings

pytestmark = [pytest.mark.engine("broken"), pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
# The suite's one test engine configuration; the logits processor is what breaks it (it kills the engine core on
# any request), so it is the only difference, and the two loads here are the same engine any other test loads.
# Named, not imported: vLLM imports the processor inside the engine core, and importing its module here would load
# vLLM into every test process that merely collects this file.
EVERY_REQUEST_QUALNAME = "tests.support.poison_logits:KillOnEveryRequest"
ENGINE = {**TEST_ENGINE, "extra": {"logits_processors": [EVERY_REQUEST_QUALNAME]}}


def test_an_engine_that_crashes_on_every_request_fails_its_canary_and_the_tag_run_stops_with_the_reason(
    tmp_path: Path, tiny_model: Path, redis_url: str, serve: type, api_key: type
) -> None:
    pytest.importorskip("vllm")
    photos = tmp_path / "photos"
    photos.mkdir()
    write_sample_photos(photos, count=6, broken=0)
    db = tmp_path / "tag.db"
    env = child_env()
    env["VLBATCH_DATABASE_URL"] = f"sqlite:///{db}"
    env["VLBATCH_BREAKER_BACKOFF_S"] = "1"
    env["VLBATCH_LOG_FILE"] = str(tmp_path / "tag.log")  # the engine's lines, which the terminal does not get
    # The engine core process is spawned: it finds the logits processor's module through the path.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    cmd = [sys.executable, "-c", "from cli.main import main; main()", "tag", str(photos), "--model", str(tiny_model)]
    cmd += ["--out", str(tmp_path / "out.jsonl"), "--engine", json.dumps(ENGINE)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=850, cwd=ROOT)
    assert proc.returncode != 0, proc.stderr[-4000:]
    assert "error engine_canary_failed: the engine crashes on an image request" in proc.stderr, proc.stderr[-4000:]
    assert "the items stay queued" in proc.stderr
    log = (tmp_path / "tag.log").read_text()
    assert log.count("loading engine for") == 2, log[-4000:]  # the first load and one reload after the back-off

    with sqlite3.connect(db) as conn:
        items = conn.execute("SELECT status, attempts, crash_count FROM items").fetchall()
        (job_id,) = conn.execute("SELECT id FROM jobs").fetchone()
    assert items == [("queued", 0, 0)] * 6  # nothing claimed, nothing failed, nothing charged

    settings = Settings(database_url=f"sqlite:///{db}", broker_url=redis_url, api_reconcile=False)
    headers = api_key.header(api_key.make(settings.database.database_url))
    with serve(create_app(settings)) as srv, httpx.Client(base_url=srv.url, timeout=30, headers=headers) as client:
        r = client.get("/readyz")
        assert r.status_code == 503 and r.json()["code"] == "engine_canary_failed", r.text
        assert "crashes on an image request" in r.json()["detail"], r.text
        job = client.get(f"/v1/jobs/{job_id}").json()
        assert job["stalled"].startswith("the engine of worker "), job
        assert "crashes on an image request" in job["stalled"], job

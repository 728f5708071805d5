"""HTTP -> Redis -> a real Celery worker process -> the vLLM CPU engine -> PostgreSQL, on the run's worker rig
(tests/support/rig.py).

A 220-item tagging job with corrupt inputs: every item must end in exactly one terminal state with exactly one
result row, the corrupt ones with their decode codes, the answers with the served model's name and real token
counts. The worker killed mid-job and replaced is tests/e2e/test_worker_faults.py's (a protocol fault, on the stub
engine); this job runs on the rig's worker, which is never killed.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy import text

from tests.support.albums import corrupt_album
from tests.support.rig import ServiceRig, get_job, wait_until

pytestmark = [pytest.mark.engine("rig"), pytest.mark.services, pytest.mark.timeout(1500)]

N_GOOD, N_BAD = 200, 20


def test_a_job_with_corrupt_inputs_accounts_for_every_item(rig: ServiceRig) -> None:
    root = rig.root / "corrupt-album"
    corrupt_album(root, good=N_GOOD, bad=N_BAD)
    job = rig.client.post(
        "/v1/jobs/tagging", json={"directory": str(root), "options": {"max_tags": 3, "max_tag_chars": 12}}
    ).json()
    assert job["total"] == N_GOOD + N_BAD
    wait_until(
        lambda: get_job(rig, job["id"])["status"] == "finished",
        f"the job did not finish: {rig.log_tail()}",
        timeout=900,
        alive=rig.alive,
        poll=1,
    )
    counts = get_job(rig, job["id"])["counts"]
    per_item = rig.items(job["id"])
    with rig.eng.connect() as conn:
        failures = conn.execute(
            text("SELECT ref, error_code FROM items WHERE job_id=:j AND status='failed'"), {"j": job["id"]}
        ).all()
    codes = Counter(code for _, code in failures)
    assert counts.get("succeeded", 0) + counts.get("failed", 0) == job["total"]
    assert counts["failed"] == N_BAD, [f for f in failures if not Path(f[0]).name.startswith("z")][:5]
    assert len(per_item) == job["total"] and all(n == 1 for _, n, _, _, _ in per_item)
    assert all(status in ("succeeded", "failed") for _, _, _, status, _ in per_item)
    assert set(codes) <= {"decode_error", "empty_file"}, codes
    lines = rig.client.get(f"/v1/jobs/{job['id']}/results.jsonl").text.splitlines()
    ok = [json.loads(x) for x in lines if json.loads(x)["status"] == "succeeded"]
    assert len(ok) == N_GOOD and all(len(r["output"]["tags"]) <= 3 for r in ok)
    assert all(r["model"] == rig.model and r["prompt_tokens"] > 0 for r in ok)


def test_the_rig_worker_runs_on_the_engine_it_decided_with_no_engine_settings(rig: ServiceRig) -> None:
    """Issue 40's "``vlbatch worker`` with no engine settings starts on this machine": the rig's worker is given none
    (tests/support/rig.py), so the jobs above ran on what it decided (tests/worker/test_worker_engine.py)."""
    assert not any(name.startswith("VLBATCH_ENGINE") and name != "VLBATCH_ENGINE_LOAD_LEDGER" for name in rig.env)
    log = rig.log.read_text(errors="replace")
    assert "max_model_len 4096, dtype float32, KV cache" in log, rig.log_tail()
    rig.alive()

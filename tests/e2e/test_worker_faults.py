"""A worker stopped mid-job, by SIGTERM (drain) or SIGKILL, and replaced: the lease, drain and reconcile protocol
between real processes (Celery workers, the API, a private Redis and PostgreSQL; tests/support/rig.py).

What is under test is the protocol, not the engine, so the workers run the stub engine (engine/runtime/stub.py),
with slow steps so the signal lands mid-job; each serves a model name of its own, so a queue of its own. SIGTERM: the
leases are free within the drain bound, the worker takes no new one on its way out, nothing is claimed again beyond
what was in flight, and the replacement finishes the job. SIGKILL: a 220-item job with corrupt inputs, the worker
killed and replaced, every item ends in exactly one terminal state with exactly one result row. Each prints a
``FAULT|`` row that ``benchmarks/fault_matrix.py`` collects.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy import text

from cli.demo import DEMO_MODEL_DIR
from tests.support.albums import corrupt_album
from tests.support.rig import (
    DRAIN_S,
    finish_and_check,
    get_job,
    in_flight,
    kill_group,
    start_worker,
    stop_worker,
    submit_photos,
    terminal,
    wait_terminal,
    wait_until,
    worker_rig,
)

pytestmark = [pytest.mark.services, pytest.mark.timeout(600)]

N_ITEMS = 48
N_GOOD, N_BAD = 200, 20


def _stub(step_s: float) -> dict[str, object]:
    """Two requests at a time, each two steps of ``step_s``: a job of dozens of items takes seconds, not less."""
    return {"backend": "stub", "max_num_seqs": 2, "admit_ahead": 0, "stub": {"step_s": step_s}}


def test_sigterm_drains_or_releases_within_bound(tmp_path: Path) -> None:
    with worker_rig(tmp_path, model_dir=DEMO_MODEL_DIR, model_name="stub-sigterm", engine=_stub(0.25)) as rig:
        job_id, started = submit_photos(rig, "sigterm", N_ITEMS)
        wait_terminal(rig, job_id, 4, timeout=150)
        at_fault = in_flight(rig, job_id)
        assert rig.worker is not None
        sent = time.monotonic()
        os.killpg(rig.worker.pid, signal.SIGTERM)
        held_sql = text("SELECT count(*) FROM chunks WHERE job_id=:j AND NOT done AND lease_owner IS NOT NULL")

        def held() -> int:
            with rig.eng.connect() as conn:
                return int(conn.execute(held_sql, {"j": job_id}).scalar_one())

        deadline = sent + DRAIN_S + 30  # drain, then hand back: the leases are free within this
        while (still := held()) and time.monotonic() < deadline:
            time.sleep(0.5)
        released_in = time.monotonic() - sent
        assert still == 0, f"{still} chunks still leased {released_in:.0f} s after SIGTERM; " + rig.log_tail()
        assert terminal(rig, job_id) < N_ITEMS, "the job finished before the signal; the test proves nothing"
        try:  # the engine's own shutdown follows; a supervisor's kill ends it if it lingers
            rig.worker.wait(120)
        except subprocess.TimeoutExpired:
            kill_group(rig.worker)
        exited_in = time.monotonic() - sent
        assert held() == 0  # and it took no new lease on its way out
        rig.worker = start_worker(rig.env, rig.log)  # the replacement finishes the job unattended
        fault = f"worker SIGTERM (leases free in {released_in:.0f} s, exited in {exited_in:.0f} s)"
        counts = finish_and_check(rig, fault, job_id, started, at_fault, N_ITEMS)
        assert counts["succeeded"] == N_ITEMS, "the shutdown failed no item"
        stop_worker(rig.worker)


def test_job_survives_sigkill_and_accounts_for_every_item(tmp_path: Path) -> None:
    name = "stub-sigkill"
    timing = {"VLBATCH_LEASE_SECONDS": "15", "VLBATCH_RECONCILE_INTERVAL_S": "3"}
    with worker_rig(
        tmp_path, model_dir=DEMO_MODEL_DIR, model_name=name, engine=_stub(0.1), chunk_size=8, **timing
    ) as rig:
        root = rig.root / "album"
        corrupt_album(root, good=N_GOOD, bad=N_BAD)
        job = rig.client.post(
            "/v1/jobs/tagging", json={"directory": str(root), "options": {"max_tags": 3, "max_tag_chars": 12}}
        ).json()
        assert job["total"] == N_GOOD + N_BAD
        started = time.monotonic()
        wait_until(
            lambda: get_job(rig, job["id"])["counts"].get("succeeded", 0) >= 40,
            "40 items answered before the kill",
            timeout=150,
            alive=rig.alive,
        )
        assert rig.worker is not None
        os.killpg(rig.worker.pid, signal.SIGKILL)
        rig.worker.wait(30)
        mid = get_job(rig, job["id"])["counts"]
        assert mid.get("succeeded", 0) + mid.get("failed", 0) < job["total"], "job finished before the kill"
        at_fault = in_flight(rig, job["id"])  # their leases lapse; only they may be claimed again
        rig.worker = start_worker(rig.env, rig.log)
        counts = finish_and_check(rig, "worker SIGKILL and replaced", job["id"], started, at_fault, job["total"])
        stop_worker(rig.worker)
        with rig.eng.connect() as conn:
            failures = conn.execute(
                text("SELECT ref, error_code FROM items WHERE job_id=:j AND status='failed'"), {"j": job["id"]}
            ).all()
        codes = Counter(code for _, code in failures)
        assert counts["succeeded"] + counts["failed"] == job["total"]
        assert counts["failed"] == N_BAD, [f for f in failures if not Path(f[0]).name.startswith("z")][:5]
        assert set(codes) <= {"decode_error", "empty_file"}, codes
        lines = rig.client.get(f"/v1/jobs/{job['id']}/results.jsonl").text.splitlines()
        ok = [json.loads(x) for x in lines if json.loads(x)["status"] == "succeeded"]
        assert len(ok) == N_GOOD and all(len(r["output"]["tags"]) <= 3 for r in ok)
        assert all(r["model"] == name and r["prompt_tokens"] > 0 for r in ok)

"""Invariant 5 end to end: an item that kills the engine every time it runs fails alone, and the rest finish.

``vlbatch run-batch`` (the real feeder, embedded) answers a completions batch with the stub engine
(``engine.runtime.stub``) told to die whenever the request with the poison seed is running, as a real engine core
does when a kernel faults on one input. The runner sees the step fail, the feeder restarts the engine once per
crash, retries the requests that were in it alone, and fails the poisoned item as ``engine_crash`` after
``MAX_CRASHES_PER_ITEM`` solo crashes; every other item is answered. That a real vLLM engine core killed by a signal
is seen by the runner is the core-death test's (tests/engine/test_core_death.py).
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.engine import child_env
from worker.feeder import MAX_CRASHES_PER_ITEM

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[2]
N_LINES = 6
POISONED = 3
POISON_SEED = 977_531  # the seed that marks the poisoned request
# A slow step, so both chunks' requests are in the engine together when the poisoned one first runs.
ENGINE = {"backend": "stub", "max_num_seqs": 8, "stub": {"poison_seeds": [POISON_SEED], "step_s": 0.05}}


def _lines() -> list[str]:
    lines = []
    for i in range(N_LINES):
        body: dict[str, object] = {"model": "m", "prompt": f"Count from {i} to {i + 5}:", "max_tokens": 12}
        if i == POISONED:
            body["seed"] = POISON_SEED
        lines.append(json.dumps({"custom_id": f"line-{i}", "method": "POST", "url": "/v1/completions", "body": body}))
    return lines


def test_an_item_that_kills_the_engine_every_time_fails_alone_and_the_rest_finish(
    tmp_path: Path, tiny_model: Path
) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(_lines()) + "\n")
    out = tmp_path / "out.jsonl"
    db = tmp_path / "poison.db"
    env = child_env()
    env["VLBATCH_DATABASE_URL"] = f"sqlite:///{db}"
    env["VLBATCH_CHUNK_SIZE"] = "3"  # two chunks side by side: both see each crash, the engine restarts once
    env["VLBATCH_LOG_FILE"] = str(tmp_path / "run-batch.log")  # the engine's lines, which the terminal does not get
    cmd = [sys.executable, "-c", "from cli.main import main; main()", "run-batch"]
    cmd += ["-i", str(src), "-o", str(out), "--model", str(tiny_model), "--engine", json.dumps(ENGINE)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    log = (tmp_path / "run-batch.log").read_text()

    rows = {json.loads(x)["custom_id"]: json.loads(x) for x in out.read_text().splitlines()}
    assert sorted(rows) == sorted(f"line-{i}" for i in range(N_LINES))
    for i in range(N_LINES):
        row = rows[f"line-{i}"]
        if i == POISONED:  # a per-request failure, as vLLM's run-batch writes one: a 500 with the error code
            assert row["response"]["status_code"] == 500, row
            assert row["response"]["body"]["error"]["code"] == "engine_crash", row
        else:
            assert row["error"] is None and row["response"]["status_code"] == 200, row
            assert row["response"]["body"]["usage"]["completion_tokens"] > 0, row
    assert f"{N_LINES} lines: {N_LINES - 1} answered, 1 failed" in proc.stdout

    with sqlite3.connect(db) as conn:
        items = conn.execute("SELECT id, ref, status, error_code, crash_count FROM items ORDER BY seq").fetchall()
        result_rows = conn.execute("SELECT item_id, count(*) FROM results GROUP BY item_id").fetchall()
    statuses = [status for _, _, status, _, _ in items]
    assert len(items) == N_LINES
    assert statuses.count("succeeded") + statuses.count("failed") == N_LINES
    assert statuses.count("failed") == 1 and statuses[POISONED] == "failed"
    assert items[POISONED][3] == "engine_crash" and items[POISONED][4] == MAX_CRASHES_PER_ITEM
    assert all(crash == 0 for n, (_, _, _, _, crash) in enumerate(items) if n != POISONED)
    assert sorted(item_id for item_id, _ in result_rows) == sorted(i[0] for i in items)  # one row per item
    assert all(count == 1 for _, count in result_rows)

    # Each crash was seen by the runner (the engine's step raised) and was followed by exactly one fresh engine: one
    # per solo run of the poisoned item, plus possibly the first with others beside it. Both chunks may report one
    # crash, so the reports are at least the restarts.
    restarts = log.count("loading engine for") - 1
    assert MAX_CRASHES_PER_ITEM <= restarts <= MAX_CRASHES_PER_ITEM + 1, log[-4000:]
    reported = log.count("engine core process died") + log.count("engine step failed with")
    assert reported >= restarts, log[-4000:]

"""``vlbatch tag`` on the stub engine: a small album tagged end to end on SQLite in seconds, with no model loaded,
and a stub broken for every image stopped by the canary and the breaker before any claim.

The engine configuration alone (``--engine '{"backend": "stub"}'``) swaps vLLM for the stub engine; everything else
is the real command: the feeder, decoding, the chat template of the model directory, the tagging pipeline's schema
and parser, the export. A broken file fails alone with its code; every photo gets the schema's smallest answer.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from cli.demo import DEMO_MODEL_DIR, write_sample_photos
from engine.runtime.load_ledger import loads
from tests.support.engine import child_env

pytestmark = pytest.mark.timeout(180)

ROOT = Path(__file__).resolve().parents[2]
# The command, and then which engine libraries it imported: the stub path must import no vLLM.
RUN = (
    "import atexit, sys\n"
    "atexit.register(lambda: print('imported:', sorted(m for m in ('vllm',) if m in sys.modules), file=sys.stderr))\n"
    "from cli.main import main\n"
    "main()\n"
)


def test_vlbatch_tag_on_the_stub_engine_tags_an_album_end_to_end(tmp_path: Path) -> None:
    photos = tmp_path / "photos"
    write_sample_photos(photos, count=5, broken=1)
    db, out, ledger = tmp_path / "tag.db", tmp_path / "out.jsonl", tmp_path / "loads.tsv"
    log_file = tmp_path / "tag.log"
    env = child_env(
        VLBATCH_DATABASE_URL=f"sqlite:///{db}", VLBATCH_ENGINE_LOAD_LEDGER=str(ledger), VLBATCH_LOG_FILE=str(log_file)
    )
    engine = {"backend": "stub", "stub": {"chars_per_token": 3}}
    cmd = [sys.executable, "-c", RUN, "tag", str(photos), "--model", str(DEMO_MODEL_DIR), "--max-tags", "3"]
    cmd += ["--out", str(out), "--engine", json.dumps(engine)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=150, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "5 succeeded, 1 failed; 6 rows" in proc.stdout, proc.stdout
    assert "imported: []" in proc.stderr and "loading engine for" not in proc.stderr, proc.stderr[-4000:]  # quiet
    assert log_file.read_text().count("loading engine for") == 1  # the engine's lines are in the command's log
    assert loads(ledger) == [] and len(loads(ledger, backend="stub")) == 1  # counted, and not as a vLLM load

    rows = {Path(r["ref"]).name: r for r in map(json.loads, out.read_text().splitlines())}
    assert len(rows) == 6
    broken = rows.pop("broken_0.jpg")
    assert broken["status"] == "failed" and broken["error_code"] in ("decode_error", "empty_file"), broken
    for row in rows.values():  # the tagging schema's smallest instance: one tag, parsed and normalised
        assert row["status"] == "succeeded" and len(row["output"]["tags"]) == 1, row
        assert row["prompt_tokens"] > 64 and row["completion_tokens"] > 0, row  # the image's tokens and the text's
    with sqlite3.connect(db) as conn:
        per_item = conn.execute("SELECT count(*) FROM results GROUP BY item_id").fetchall()
    assert len(per_item) == 6 and all(n == 1 for (n,) in per_item)


def test_vlbatch_tag_on_a_stub_that_crashes_on_every_image_fails_its_canary_and_claims_nothing(tmp_path: Path) -> None:
    # The stub's image fault reaches the same canary and breaker as a real engine's (tests/e2e/test_broken_engine.py).
    photos = tmp_path / "photos"
    write_sample_photos(photos, count=3, broken=0)
    db = tmp_path / "tag.db"
    log_file = tmp_path / "tag.log"
    env = child_env(
        VLBATCH_DATABASE_URL=f"sqlite:///{db}", VLBATCH_BREAKER_BACKOFF_S="1", VLBATCH_LOG_FILE=str(log_file)
    )
    engine = {"backend": "stub", "stub": {"crash_on_images": True}}
    cmd = [sys.executable, "-c", RUN, "tag", str(photos), "--model", str(DEMO_MODEL_DIR)]
    cmd += ["--out", str(tmp_path / "out.jsonl"), "--engine", json.dumps(engine)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=150, cwd=ROOT)
    assert proc.returncode != 0, proc.stderr[-4000:]
    assert "error engine_canary_failed: the engine crashes on an image request" in proc.stderr, proc.stderr[-4000:]
    log = log_file.read_text()
    assert log.count("loading engine for") == 2, log[-4000:]  # the first load and one reload after the back-off
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT status, attempts, crash_count FROM items").fetchall() == [("queued", 0, 0)] * 3

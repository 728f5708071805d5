"""``vlbatch eval`` on the stub engine with the tagging options ``language`` and ``context``: the real command, the
feeder's rounds, the model directory's chat template, the export and the report, with no model loaded.

The stub answers by what the prompt holds: the file name, which the context block tells it, picks a German answer
for one photo; the others get an English one, then again after the second round asks for German. So one answer is
in the asked language at once and two are kept with their ``answer_language_mismatch`` warning, and the report's
language share is one in three.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cli.demo import DEMO_MODEL_DIR, write_sample_photos
from tests.support.engine import child_env

pytestmark = pytest.mark.timeout(240)

ROOT = Path(__file__).resolve().parents[2]
ENGLISH = json.dumps({"tags": ["wedding", "family", "mountain lake"], "caption": "A wedding by a lake."})
GERMAN = json.dumps({"tags": ["Hochzeit", "Familie", "Bergsee"], "caption": "Eine Hochzeit am See."})


def test_eval_on_the_stub_reports_the_language_share_and_keeps_warnings(tmp_path: Path) -> None:
    photos = tmp_path / "labelled"
    written = write_sample_photos(photos, count=3, broken=0)
    german = written[0].name
    (photos / "labels.jsonl").write_text(
        "".join(json.dumps({"path": p.name, "tags": ["hochzeit"]}) + "\n" for p in written)
    )
    stub = {"answer": ENGLISH, "answers": {f"- filename: {german}": GERMAN}, "schema_answers": False}
    out = tmp_path / "eval"
    cmd = [sys.executable, "-m", "cli.main", "eval", str(photos), "--model", str(DEMO_MODEL_DIR)]
    cmd += ["--engine", json.dumps({"backend": "stub", "stub": stub}), "--out", str(out)]
    cmd += ["--options", json.dumps({"language": "de", "caption": True, "context": ["filename"]})]
    env = child_env(VLBATCH_LOG_FILE=str(tmp_path / "eval.log"))
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=200, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "answers in the asked language ('de'): 33.3% of 3 that could be judged" in proc.stdout, proc.stdout

    rows = {Path(r["ref"]).name: r for r in map(json.loads, (out / "run.jsonl").read_text().splitlines())}
    assert rows[german]["output"]["tags"] == ["hochzeit", "familie", "bergsee"]
    assert "warnings" not in rows[german]["output"]
    assert rows[german]["completion_tokens"] == -(-len(GERMAN) // 4)  # one round (the stub: 4 characters a token)
    for name, row in rows.items():
        if name != german:
            (warning,) = row["output"]["warnings"]
            assert warning["code"] == "answer_language_mismatch", row
            assert row["completion_tokens"] == 2 * -(-len(ENGLISH) // 4)  # two rounds, both counted

"""`vlbatch demo` on the real CPU engine: the embedded path (SQLite, no broker) from the console script."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cli.evaluation.run import read_results
from tests.support.engine import child_env

pytestmark = [pytest.mark.engine("demo"), pytest.mark.timeout(900)]

ENGINE = {"max_num_seqs": 16}


def test_demo_tags_every_photo_and_fails_only_the_broken_ones(tmp_path: Path) -> None:
    pytest.importorskip("vllm")
    work = tmp_path / "demo"
    work.mkdir()
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "from cli.main import main; main()",
            "demo",
            "--workdir",
            str(work),
            "--photos",
            "12",
            "--engine",
            json.dumps(ENGINE),
        ],
        capture_output=True,
        text=True,
        timeout=840,
        cwd=tmp_path,
        env=child_env(),
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows = read_results(work / "results.jsonl")  # tags as names, output decoded
    assert len(rows) == 14  # 12 photos + 2 broken files, one row each
    failed = {Path(r["ref"]).name: r["error_code"] for r in rows if r["status"] == "failed"}
    assert failed == {"broken_0.jpg": "decode_error", "broken_1.jpg": "empty_file"}
    ok = [r for r in rows if r["status"] == "succeeded"]
    assert len(ok) == 12
    for r in ok:
        assert len(r["tags"]) <= 5 and all(t == t.strip().lower() for t in r["tags"])
        assert isinstance(r["output"]["caption"], str) and len(r["output"]["caption"]) <= 60
        assert r["model"] == "tiny-tagger-qwen2-vl" and r["prompt_tokens"] > 0 and r["completion_tokens"] > 0
    assert "12 succeeded, 2 failed of 14" in proc.stdout
    # The shipped model was trained on such scenes: the line is measured against the photos' labels.
    (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("scene tag accuracy: ")]
    correct, scored = map(int, line.split()[3].split("/"))
    assert scored == 12 and correct / scored >= 0.8, line

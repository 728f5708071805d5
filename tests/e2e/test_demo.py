"""`vlbatch demo` on the real CPU engine: the embedded path (SQLite, no broker) from the console script."""

from __future__ import annotations

import json
import re
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
    _quiet_terminal(proc, work, tmp_path)
    # The shipped model was trained on such scenes: the line is measured against the photos' labels.
    (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("scene tag accuracy: ")]
    correct, scored = map(int, line.split()[3].split("/"))
    assert scored == 12 and correct / scored >= 0.8, line


def _quiet_terminal(proc: subprocess.CompletedProcess[str], work: Path, cwd: Path) -> None:
    """Issue 35: the demo prints at most 40 lines, none of them another library's log line, and names its log
    file, which holds what was kept off the terminal: vLLM's lines from this process and from its engine core."""
    shown = proc.stdout.splitlines() + proc.stderr.splitlines()
    assert len(shown) <= 40, "\n".join(shown)
    log_like = re.compile(
        r"^(\d{4}-\d\d-\d\d[ T]\d\d:\d\d|\(\w+ pid=\d+\)|[IWEF]\d{4} |INFO|WARNING|DEBUG|\[transformers\])"
    )
    leaked = [ln for ln in shown if log_like.search(ln) or "Traceback" in ln or "warnings.warn" in ln]
    assert not leaked, "\n".join(leaked)
    named = proc.stderr.splitlines()[-1]
    assert named.startswith("log: ") and (cwd / named[5:]).resolve() == (work / "vlbatch-demo.log").resolve(), named
    logged = (work / "vlbatch-demo.log").read_text()
    assert " INFO vllm." in logged and "EngineCore" in logged, logged[-2000:]  # the engine core process's lines too

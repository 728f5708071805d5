"""The real vLLM engine core process killed while requests run: they fail with EngineCrashed within seconds
(the watchdog; vLLM's step() may block for ever), and a restarted engine answers again. A core sent SIGTERM
aborts its requests instead: those fail the same way and never come back as answers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import json, os, signal, sys, time
from pathlib import Path
from engine.runtime.config import EngineConfig
from engine.runtime.requests import EngineCrashed, GenerationRequest
from engine.runtime.runner import EngineRunner

if __name__ == "__main__":
    cfg = EngineConfig(model=sys.argv[1], dtype="float32", max_model_len=2048, kv_cache_memory_bytes=256 << 20,
                       enforce_eager=True, max_num_seqs=8)
    runner = EngineRunner(cfg)
    runner.load()
    procs = [p.pid for p in runner._core_procs]
    futures = runner.submit([GenerationRequest(request_id=f"r{i}", prompt="hello " * 8, max_tokens=1500)
                             for i in range(6)])
    time.sleep(3)  # the requests are in the engine, decoding
    killed_at = time.monotonic()
    os.kill(procs[0], signal.SIGKILL)
    errors = []
    for fut in futures:
        try:
            fut.result(timeout=60)
            errors.append("answered")
        except EngineCrashed as exc:
            errors.append(exc.code)
    failed_after = time.monotonic() - killed_at
    healthy = runner.healthy(max_stall_s=600)
    generation = runner.generation
    runner.restart(crashed_generation=generation)
    again = runner.submit([GenerationRequest(request_id="after", prompt="hello", max_tokens=4)])[0].result(120)
    # A stop signal, as a supervisor sends one to the whole process group: vLLM's core aborts what it runs and
    # ends each request cut short ("abort"). None of that may come back as an answer.
    futures = runner.submit([GenerationRequest(request_id=f"t{i}", prompt="hello " * 8, max_tokens=1500)
                             for i in range(6)])
    time.sleep(3)
    os.kill(runner._core_procs[0].pid, signal.SIGTERM)
    stopped = []
    for fut in futures:
        try:
            fut.result(timeout=60)
            stopped.append("answered")
        except EngineCrashed as exc:
            stopped.append(exc.code)
    # A file, not stdout: the engine core process writes its log lines to the same stdout at any moment.
    Path(sys.argv[2]).write_text(json.dumps({"core_procs": len(procs), "errors": errors, "failed_after": failed_after,
                                             "healthy": healthy, "generation": runner.generation,
                                             "after_tokens": again.completion_tokens, "stopped": stopped}))
    runner.close(abandon=True)
"""


@pytest.mark.engine
@pytest.mark.timeout(1200)  # two engine loads; minutes each on a loaded 2-core machine
def test_a_killed_engine_core_fails_its_requests_and_the_engine_restarts(tiny_model: Path, tmp_path: Path) -> None:
    pytest.importorskip("vllm")
    script = tmp_path / "core_death.py"
    script.write_text(SCRIPT)
    out = tmp_path / "result.json"
    proc = subprocess.run(
        [sys.executable, str(script), str(tiny_model), str(out)], capture_output=True, text=True, timeout=1100, cwd=ROOT
    )
    assert out.is_file(), proc.stderr[-4000:]
    res = json.loads(out.read_text())
    assert res["core_procs"] >= 1  # the runner found the core process it started
    assert res["errors"] == ["engine_crash"] * 6
    assert res["failed_after"] < 15  # the watchdog polls every second; not a lease-long stall
    assert res["healthy"] is False and res["generation"] == 2
    assert res["after_tokens"] > 0
    assert res["stopped"] == ["engine_crash"] * 6  # a SIGTERMed core's aborted requests are no answers

"""The real vLLM engine core process killed while requests run: they fail with EngineCrashed within seconds
(the watchdog; vLLM's step() may block for ever), and a restarted engine answers again. A core sent SIGTERM
aborts its requests instead: those fail the same way and never come back as answers.

It runs on the run's shared engine, after every other test of it (``engine_last``): the restart is the group's one
extra load, and the engine it leaves (its core stopped) is closed, never lent again.
"""

from __future__ import annotations

import os
import signal
import time
from concurrent.futures import Future

import pytest

from engine.runtime.requests import EngineCrashed, GenerationRequest, GenerationResult
from engine.runtime.runner import EngineRunner

pytestmark = [pytest.mark.engine("shared"), pytest.mark.engine_last]


def _codes(futures: list[Future[GenerationResult]]) -> list[str]:
    codes = []
    for fut in futures:
        try:
            fut.result(timeout=60)
            codes.append("answered")
        except EngineCrashed as exc:
            codes.append(exc.code)
    return codes


def _long(prefix: str) -> list[GenerationRequest]:
    return [GenerationRequest(request_id=f"{prefix}{i}", prompt="hello " * 8, max_tokens=1500) for i in range(6)]


def _decoding(runner: EngineRunner, n: int = 6) -> None:
    """Wait until ``n`` requests are inside the engine and it has stepped with them: they are decoding, far from
    their token limit (a fixed sleep let a fast host finish them before the kill)."""
    start = runner.occupancy().steps
    deadline = time.monotonic() + 300
    while runner.in_engine < n or runner.occupancy().steps < start + 2:
        assert time.monotonic() < deadline, "the requests never started decoding"
        time.sleep(0.01)  # a wait for the condition, not a timing being measured


@pytest.mark.timeout(1200)  # the restart is an engine load: minutes on a loaded 2-core machine
def test_a_killed_engine_core_fails_its_requests_and_the_engine_restarts(shared_engine: EngineRunner) -> None:
    runner = shared_engine
    assert runner.generation == 1  # the shared engine as loaded: no earlier test restarted it
    procs = [p.pid for p in runner._core_procs]
    assert len(procs) >= 1  # the runner found the core process it started
    futures = runner.submit(_long("r"))
    _decoding(runner)
    killed_at = time.monotonic()
    os.kill(procs[0], signal.SIGKILL)
    errors = _codes(futures)
    failed_after = time.monotonic() - killed_at
    assert errors == ["engine_crash"] * 6
    assert failed_after < 15  # the watchdog polls every second; not a lease-long stall
    assert runner.healthy(max_stall_s=600) is False

    runner.restart(crashed_generation=runner.generation)
    assert runner.generation == 2
    again = runner.submit([GenerationRequest(request_id="after", prompt="hello", max_tokens=4)])[0].result(120)
    assert again.completion_tokens > 0

    # A stop signal, as a supervisor sends one to the whole process group: vLLM's core aborts what it runs and
    # ends each request cut short ("abort"). None of that may come back as an answer.
    futures = runner.submit(_long("t"))
    _decoding(runner)
    os.kill(runner._core_procs[0].pid, signal.SIGTERM)
    assert _codes(futures) == ["engine_crash"] * 6  # a SIGTERMed core's aborted requests are no answers

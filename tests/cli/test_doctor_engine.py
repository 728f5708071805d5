"""``vlbatch doctor`` predicts, loading nothing, the engine settings that would fail after a minute of loading (a
context over the model's, a KV cache over the free memory), one line each with its code; ``doctor --canary`` ends in
one line with a code when the engine does not load. On the shipped tiny tagger and the stub engine: no vLLM load."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli import doctor
from cli.demo import DEMO_MODEL_DIR
from cli.main import app
from engine.planning.host_fit import HostMemory
from vlbatch.settings import Settings

GiB = 1024**3
ISSUE_HOST = HostMemory(total=int(23.54 * GiB), available=int(19.05 * GiB))  # issue 40's laptop
README_ENGINE = {"dtype": "float16", "max_model_len": 16384, "gpu_memory_utilization": 0.86}


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for k in list(os.environ):
        if k.startswith("VLBATCH_") and k != "VLBATCH_ENGINE_LOAD_LEDGER":
            monkeypatch.delenv(k)
    monkeypatch.chdir(tmp_path)  # no stray .env


def engine_lines(engine: dict[str, object], memory: HostMemory | None = ISSUE_HOST) -> list[doctor.Check]:
    settings = Settings(platform="cpu", model_path=str(DEMO_MODEL_DIR), engine=engine)
    checks = doctor.run_checks(settings, doctor.Host(memory=lambda s: memory), require_npu=False)
    return [c for c in checks if c.message.startswith(("engine fits", "engine settings"))]


def test_the_readmes_worker_engine_is_flagged_in_one_line_with_its_code() -> None:
    (line,) = engine_lines(README_ENGINE)
    assert line.status == "fail"
    assert line.message.startswith(
        "engine settings (context_over_model): max_model_len 16384 is above the model's own context, 4096"
    )


def test_vllms_share_of_all_ram_over_the_free_memory_is_flagged_in_one_line_with_its_code() -> None:
    (line,) = engine_lines({"dtype": "float16", "gpu_memory_utilization": 0.86})
    assert line.status == "fail"
    assert line.message.startswith(
        "engine settings (kv_cache_over_memory): gpu_memory_utilization 0.86 of this host's 23.54 GiB is 20.24 GiB, "
        "more than the 19.05 GiB available"
    )


def test_no_engine_settings_say_what_the_worker_would_start_with() -> None:
    (line,) = engine_lines({})
    assert line.status == "ok"
    assert line.message == (
        "engine fits: max_model_len 4096, dtype float32, KV cache 0.50 GiB, 19.05 GiB of memory available"
    )
    (device,) = engine_lines({}, memory=None)
    assert (
        device.message
        == "engine fits: max_model_len 4096, dtype auto; the KV cache is sized by the engine on the device"
    )


def test_a_model_path_without_a_model_adds_no_engine_line() -> None:
    settings = Settings(platform="cpu", model_path="/nonexistent/model")
    checks = doctor.run_checks(settings, doctor.Host(memory=lambda s: ISSUE_HOST), require_npu=False)
    assert not [c for c in checks if c.message.startswith(("engine fits", "engine settings"))]
    assert any("is not a directory" in c.message for c in checks if c.status == "fail")


def test_doctor_on_this_machine_flags_the_readmes_engine_as_a_command(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLBATCH_")}
    env |= {"VLBATCH_MODEL_PATH": str(DEMO_MODEL_DIR), "VLBATCH_ENGINE": json.dumps(README_ENGINE)}
    proc = subprocess.run(
        [sys.executable, "-c", "from cli.main import main; main()", "doctor", "--no-require-npu"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    fails = [ln for ln in proc.stdout.splitlines() if ln.startswith("FAIL")]
    assert len(fails) == 1 and "(context_over_model): max_model_len 16384" in fails[0], proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr


def stub_canary(monkeypatch: pytest.MonkeyPatch, stub: dict[str, object]) -> tuple[int, list[str]]:
    monkeypatch.setenv("VLBATCH_PLATFORM", "cpu")
    monkeypatch.setenv("VLBATCH_MODEL_PATH", str(DEMO_MODEL_DIR))
    monkeypatch.setenv("VLBATCH_ENGINE", json.dumps({"backend": "stub", "stub": stub}))
    result = CliRunner().invoke(app, ["doctor", "--canary", "--no-require-npu"])
    return result.exit_code, result.output.splitlines()


def test_an_engine_that_does_not_load_ends_the_canary_in_one_line_with_a_code(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    cause = "Engine core initialization failed. See root cause above.\n" * 40 + "Failed core proc(s): {}"
    code, lines = stub_canary(monkeypatch, {"load_error": cause})
    assert code == 1
    assert lines[-1] == (
        "FAIL  engine canary (engine_load_failed): the engine did not load (RuntimeError: Failed core proc(s): {}); "
        "the log has the engine's own error"
    )
    assert not any("Traceback" in ln or "initialization failed" in ln for ln in lines)
    assert any(r.exc_info and "initialization failed" in str(r.exc_info[1]) for r in caplog.records)  # in the log


def test_an_engine_that_loads_passes_the_canary(monkeypatch: pytest.MonkeyPatch) -> None:
    code, lines = stub_canary(monkeypatch, {})
    assert code == 0, lines
    assert lines[-1].startswith("ok    engine canary: an image and a text request answered in")


def test_settings_that_cannot_start_skip_the_canary(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLBATCH_MODEL_PATH", str(DEMO_MODEL_DIR))
    monkeypatch.setenv("VLBATCH_ENGINE", json.dumps({**README_ENGINE, "backend": "stub"}))
    result = CliRunner().invoke(app, ["doctor", "--canary", "--no-require-npu"])
    assert result.exit_code == 1
    assert result.output.splitlines()[-1] == (
        "FAIL  engine canary: not run, the engine settings cannot start (the lines above say why)"
    )

"""benchmarks/harness/children.py: what a benchmark's child process starts with, and one real ``vlbatch api`` child
on SQLite started, asked ``/healthz`` and stopped (the benchmarks that drive it run for minutes; this does not)."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest

from benchmarks.harness.children import api_process, child_env


def test_a_child_gets_the_run_settings_and_none_of_the_shell_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLBATCH_MODEL_NAME", "from-the-shell")
    monkeypatch.setenv("VLBATCH_AUTH", "off")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "shell-key")
    monkeypatch.setenv("KEEP_ME", "1")
    env = child_env({"VLBATCH_AUTH": "on"})
    assert env["VLBATCH_AUTH"] == "on" and "VLBATCH_MODEL_NAME" not in env
    assert env["KEEP_ME"] == "1" and env["AWS_ACCESS_KEY_ID"] == "shell-key"
    env = child_env({"AWS_ENDPOINT_URL": "http://127.0.0.1:1"}, drop=("VLBATCH_", "AWS_"))
    assert not any(k.startswith("VLBATCH_") for k in env) and "AWS_ACCESS_KEY_ID" not in env
    assert env["AWS_ENDPOINT_URL"] == "http://127.0.0.1:1" and env["KEEP_ME"] == "1"


def test_an_api_child_answers_healthz_and_is_gone_after(
    tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLBATCH_CHUNK_SIZE", "not a number")  # the API would refuse to start if this reached it
    env = child_env({"VLBATCH_DATABASE_URL": f"sqlite:///{tmp_path / 'api.db'}", "VLBATCH_BROKER_URL": redis_url})
    log = tmp_path / "api.log"
    with api_process(env, log, cwd=tmp_path) as api:
        assert httpx.get(f"{api.base}/healthz", timeout=10).json() == {"status": "ok"}
        pid = api.pid
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # stopped and reaped
    assert log.exists()


def test_an_api_child_that_exits_at_start_says_why(tmp_path: Path) -> None:
    env = child_env({"VLBATCH_DATABASE_URL": f"sqlite:///{tmp_path / 'api.db'}", "VLBATCH_CHUNK_SIZE": "bad"})
    refused = pytest.raises(RuntimeError, match=r"(?si)vlbatch api exited: .*chunk_size")  # the log's tail says why
    with refused, api_process(env, tmp_path / "api.log"):
        pytest.fail("a child with an invalid setting answered /healthz")

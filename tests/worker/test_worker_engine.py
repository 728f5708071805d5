"""The engine a ``vlbatch worker`` hands vLLM (``worker.celery_worker.engine_config``): with no engine settings on a CPU
host, the model's own context and a KV cache from the model; a setting that cannot start ends the worker in one line
with its code, before any load. The rig's real worker (tests/support/rig.py) runs with no engine settings, so its one
load in the ``rig`` group shows the same configuration starting on this machine."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine.planning.shapes import read_model_config
from engine.platforms.cpu_host import available_memory_bytes
from tests.support.engine import child_env
from tests.support.rig import ROOT, worker_env
from vlbatch.settings import Settings
from worker.celery_worker import engine_config

README_ENGINE = {"dtype": "float16", "max_model_len": 16384, "gpu_memory_utilization": 0.86}


def test_no_engine_settings_on_a_cpu_host(tiny_model: Path) -> None:
    config = engine_config(Settings(platform="cpu", model_path=str(tiny_model)))
    per_token = read_model_config(tiny_model).text.kv_bytes_per_token(dtype_bytes=4)
    assert (config.max_model_len, config.dtype) == (4096, "float32")  # the model's own, in its own precision
    assert config.kv_cache_memory_bytes == min(per_token * 4096 * config.max_num_seqs, available_memory_bytes() // 4)
    assert config.llm_kwargs()["kv_cache_memory_bytes"] == config.kv_cache_memory_bytes  # what vLLM is given


def test_the_stub_backend_takes_the_same_arguments(tiny_model: Path) -> None:
    """A worker's planning does not depend on the backend it feeds."""
    config = engine_config(Settings(platform="cpu", model_path=str(tiny_model), engine={"backend": "stub"}))
    assert (config.backend, config.max_model_len, config.dtype) == ("stub", 4096, "float32")


def test_an_accelerator_host_keeps_the_engines_own_kv_sizing(tiny_model: Path) -> None:
    config = engine_config(Settings(platform="cuda", model_path=str(tiny_model)))
    assert config.kv_cache_memory_bytes is None and config.max_model_len == 4096


def test_the_readmes_engine_ends_the_worker_in_one_line_before_any_load(tiny_model: Path, tmp_path: Path) -> None:
    env = child_env(
        VLBATCH_DATABASE_URL=f"sqlite:///{tmp_path / 'w.db'}",
        VLBATCH_BROKER_URL="redis://127.0.0.1:1/0",  # never reached: the worker stops before it connects
        VLBATCH_MODEL_PATH=str(tiny_model),
        VLBATCH_ENGINE=json.dumps(README_ENGINE),
        VLBATCH_ENGINE_LOAD_LEDGER=str(tmp_path / "ledger"),
    )
    proc = subprocess.run(
        [sys.executable, "-c", "from cli.main import main; main()", "worker"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("error ")]
    assert lines == [
        f"error context_over_model: max_model_len 16384 is above the model's own context, 4096 "
        f"(max_position_embeddings in {tiny_model / 'config.json'}): set max_model_len to 4096 or less in "
        "VLBATCH_ENGINE or --engine, or leave it unset"
    ]
    assert not (tmp_path / "ledger").exists()  # no engine load was begun


@pytest.mark.parametrize("engine", [None, {"backend": "stub"}])
def test_the_rig_worker_environment_names_engine_settings_only_when_given(
    engine: dict[str, object] | None, tmp_path: Path
) -> None:
    places = {"database_url": "sqlite://", "broker_url": "redis://", "model_dir": tmp_path, "root": tmp_path}
    env = worker_env(model_name="m", engine=engine, **places)
    assert ("VLBATCH_ENGINE" in env) == (engine is not None)

"""The engine every embedded command (``tag``, ``docs``, ``run-batch``, ``eval``) would start on a CPU host: its KV
cache sized from the model within a share of the memory available, never vLLM's fraction of all RAM. The commands
run for real up to the engine, which is replaced by a recorder of the settings it was given: nothing is loaded."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cli.main import app
from engine.planning.shapes import read_model_config
from engine.platforms.cpu_host import available_memory_bytes
from engine.runtime.config import EngineConfig
from vlbatch.settings import Settings, get_settings

GiB = 1024**3


class Started(Exception):
    """Raised where the command would have loaded its engine."""


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[list[dict[str, Any]]]:
    """The engine arguments each command passes on, in a CPU host's settings (VLBATCH_PLATFORM=cpu)."""
    import cli.evaluation.run
    import worker.embedded
    import worker.run_batch

    engines: list[dict[str, Any]] = []

    def stop(settings: Settings, **kwargs: Any) -> None:
        engines.append(dict(settings.runtime.engine))
        raise Started

    def stop_eval(settings: Settings, *, sides: list[Any], **kwargs: Any) -> None:
        engines.extend({**settings.runtime.engine, **side.engine} for side in sides)
        raise Started

    monkeypatch.setattr(worker.embedded, "tag_directory", stop)
    monkeypatch.setattr(worker.embedded, "run_documents", stop)
    monkeypatch.setattr(worker.run_batch, "run_batch", stop)
    monkeypatch.setattr(cli.evaluation.run, "evaluate", stop_eval)
    monkeypatch.setenv("VLBATCH_PLATFORM", "cpu")
    monkeypatch.setenv("VLBATCH_DATABASE_URL", f"sqlite:///{tmp_path / 'embedded.db'}")
    get_settings.cache_clear()
    yield engines
    get_settings.cache_clear()


def _commands(model: Path, folder: Path) -> dict[str, list[str]]:
    batch = folder / "batch.jsonl"
    batch.write_text(json.dumps({"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": {}}))
    (folder / "labels.jsonl").write_text(json.dumps({"path": "a.jpg", "tags": ["sea"]}) + "\n")
    return {
        "tag": ["tag", str(folder), "--model", str(model)],
        "docs": ["docs", str(folder), "--model", str(model)],
        "run-batch": ["run-batch", "-i", str(batch), "-o", str(folder / "out.jsonl"), "--model", str(model)],
        "eval": ["eval", str(folder), "--model", str(model), "--out", str(folder / "eval")],
    }


@pytest.mark.parametrize("command", ["tag", "docs", "run-batch", "eval"])
def test_an_embedded_command_on_a_cpu_host_sizes_the_kv_cache_from_the_model(
    command: str, recorded: list[dict[str, Any]], tiny_model: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    result = CliRunner().invoke(app, _commands(tiny_model, folder)[command])
    assert isinstance(result.exception, Started), result.output
    (engine,) = recorded
    config = EngineConfig.model_validate({**engine, "model": str(tiny_model)})
    per_token = read_model_config(tiny_model).text.kv_bytes_per_token(dtype_bytes=4)
    assert config.kv_cache_memory_bytes == max(
        min(per_token * config.max_model_len * config.max_num_seqs, int(available_memory_bytes() * 0.25)),
        per_token * config.max_model_len,
        1 << 20,
    )
    assert config.kv_cache_memory_bytes < GiB  # a ~1M-parameter model: vLLM's own sizing took 19 GiB of 23.5


@pytest.mark.parametrize(
    ("env", "engine", "kept"),
    [
        ({}, '{"kv_cache_memory_bytes": 123456789}', {"kv_cache_memory_bytes": 123456789}),
        ({"VLBATCH_ENGINE": '{"gpu_memory_utilization": 0.5}'}, None, {"gpu_memory_utilization": 0.5}),
    ],
)
def test_a_kv_size_given_by_the_operator_is_kept(
    env: dict[str, str],
    engine: str | None,
    kept: dict[str, object],
    recorded: list[dict[str, Any]],
    tiny_model: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    get_settings.cache_clear()
    args = ["tag", str(tmp_path), "--model", str(tiny_model)] + (["--engine", engine] if engine else [])
    assert isinstance(CliRunner().invoke(app, args).exception, Started)
    (recorded_engine,) = recorded
    assert recorded_engine.items() >= kept.items()
    assert ("kv_cache_memory_bytes" in recorded_engine) == ("kv_cache_memory_bytes" in kept)


def test_an_accelerator_host_keeps_the_engines_own_sizing(
    recorded: list[dict[str, Any]], tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLBATCH_PLATFORM", "cuda")
    get_settings.cache_clear()
    invoke: Callable[..., Any] = CliRunner().invoke
    assert isinstance(invoke(app, ["tag", str(tmp_path), "--model", str(tiny_model)]).exception, Started)
    assert "kv_cache_memory_bytes" not in recorded[0]


@pytest.mark.parametrize("command", ["tag", "docs", "run-batch", "eval"])
def test_a_context_over_the_models_is_refused_before_the_engine_starts(
    command: str, recorded: list[dict[str, Any]], tiny_model: Path, tmp_path: Path
) -> None:
    from vlbatch.errors import CONTEXT_OVER_MODEL, VlbatchError

    folder = tmp_path / "in"
    folder.mkdir()
    args = _commands(tiny_model, folder)[command] + ["--engine", json.dumps({"max_model_len": 16384})]
    result = CliRunner().invoke(app, args)
    assert isinstance(result.exception, VlbatchError) and result.exception.code == CONTEXT_OVER_MODEL, result.output
    assert "max_model_len 16384 is above the model's own context, 4096" in result.exception.message
    assert recorded == []  # no engine was started

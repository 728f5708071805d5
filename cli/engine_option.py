"""The ``--engine`` option the model-running commands share: engine arguments as JSON over the settings."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from vlbatch.settings import Settings

ENGINE_HELP = "Engine arguments as JSON (engine.runtime.config.EngineConfig fields), over VLBATCH_ENGINE."


def engine_args(settings: Settings, engine: str | None) -> Settings:
    """``settings`` with ``--engine``'s JSON object merged over its engine arguments; BadParameter when not JSON."""
    if not engine:
        return settings
    try:
        extra = json.loads(engine)
    except json.JSONDecodeError as exc:
        raise typer.BadParameter(f"--engine is not JSON: {exc}") from exc
    if not isinstance(extra, dict):
        raise typer.BadParameter("--engine must be a JSON object")
    return settings.model_copy(update={"engine": {**settings.runtime.engine, **extra}})


def engine_for_model(settings: Settings, model_dir: Path) -> Settings:
    """``settings`` as the engine of ``model_dir`` is started with in this process (``engine.planning.host_fit``, as
    the worker's): ``max_model_len`` the model's own unless set, and on a CPU host the KV cache sized from the model
    unless the operator sized it; a setting that cannot start is a ``VlbatchError`` (one line, its code)."""
    from engine.planning.host_fit import engine_for_host

    return engine_for_host(settings, model_dir)

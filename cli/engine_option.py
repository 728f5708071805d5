"""The ``--engine`` option the model-running commands share: engine arguments as JSON over the settings."""

from __future__ import annotations

import json

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
    return settings.model_copy(update={"engine": {**settings.engine, **extra}})

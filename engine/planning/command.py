"""The body of ``vlbatch plan``: read config.json, plan, print; bad input becomes one clear line and exit code 2."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from pydantic import ValidationError

from engine.planning.planner import Plan, PlanError, plan
from engine.planning.render import DEFAULT_IMAGE, render_compose, render_text
from engine.planning.request import PlanRequest
from engine.planning.shapes import ModelConfigError, read_model_config

EXIT_BAD_INPUT = 2


def _validation_message(e: ValidationError) -> str:
    parts = []
    for err in e.errors():
        loc = ".".join(str(x) for x in err["loc"]) or "request"
        parts.append(f"{loc}: {err['msg'].removeprefix('Value error, ')}")
    return "; ".join(parts)


def parse_ids(text: str | None) -> list[int] | None:
    if text is None or not text.strip():
        return None
    try:
        return [int(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise PlanError(f"device ids {text!r} must be integers separated by commas, e.g. 0,1,4,5") from None


def read_quant_description(model_dir: Path, quantization: str) -> dict[str, object] | None:
    """A ModelSlim checkpoint's quant_model_description.json, if any; an fp16 plan of a quantized checkpoint is
    refused since its weights are not fp16."""
    path = model_dir / "quant_model_description.json"
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise PlanError(f"{path}: cannot read it ({e})") from e
    if not isinstance(data, dict):
        raise PlanError(f"{path}: expected a JSON object")
    kinds = {str(v).upper() for v in data.values() if isinstance(v, str)}
    if quantization == "fp16" and any(k.startswith(("W8A8", "W4A8")) for k in kinds):
        declared = data.get("model_quant_type", "quantized")
        raise PlanError(f"{model_dir} is a {declared} ModelSlim checkpoint ({path.name}); plan it with --quant w8a8")
    return data


def run_plan(
    model: Path,
    *,
    compose: bool = False,
    image: str = DEFAULT_IMAGE,
    model_dir: str = "/srv/models",
    out: TextIO | None = None,
    err: TextIO | None = None,
    renderer: Callable[[Plan], str] | None = None,
    **request: Any,
) -> int:
    """Print the plan (or the compose file, or what ``renderer`` makes of it) for ``model``; returns the process
    exit code."""
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        shape = read_model_config(model)
        req = PlanRequest(**request)
        mdir = model if model.is_dir() else model.parent
        description = read_quant_description(mdir, req.quantization)
        result = plan(shape, req, model_path=str(mdir.resolve()), quant_description=description)
    except ValidationError as e:
        print(f"vlbatch plan: {_validation_message(e)}", file=err)
        return EXIT_BAD_INPUT
    except (ModelConfigError, PlanError) as e:
        print(f"vlbatch plan: {e}", file=err)
        return EXIT_BAD_INPUT
    if renderer is not None:
        out.write(renderer(result))
    else:
        out.write(render_compose(result, image=image, model_dir=model_dir) if compose else render_text(result))
    return 0

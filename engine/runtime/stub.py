"""The stub engine: vLLM's ``add_request``/``step`` surface without a model, for testing pipelines and the worker.

``EngineRunner`` feeds it exactly as it feeds vLLM's ``LLMEngine`` when the engine configuration says
``"backend": "stub"`` (``VLBATCH_ENGINE='{"backend": "stub", "stub": {...}}'`` or ``--engine``), so a worker,
``vlbatch tag``, ``vlbatch run-batch`` and tests reach it alike; nothing on its path imports vLLM or torch. Its
answers are deterministic (a fixed text, or the smallest instance of a request's JSON schema, so every pipeline's
structured answer parses), and it can be told to fail as real engines do: a core that dies on chosen requests (a
poison seed, prompt marker or image colour), on every image request (vllm-ascend #12086 on 310P), steps that hang
or are slow, and a gate that holds every answer back. The worker's canary, breaker and crash policy see these
faults as they see a real engine's. docs/stub-engine.md says how to use it.
"""

from __future__ import annotations

import math
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from engine.runtime.requests import GenerationRequest
from vlbatch.errors import ENGINE_CRASH, VlbatchError


class StubConfig(BaseModel):
    """What the stub engine answers and how it fails. Mutable: a test may heal a fault on a loaded engine by
    assigning the field (every engine a runner loads reads the same object)."""

    model_config = ConfigDict(extra="forbid")

    answer: str = Field("OK", description="The answer to a request without a JSON schema.")
    answers: dict[str, str] = Field(
        default_factory=dict,
        description="Scripted answers: a request whose prompt holds one of these texts is answered with its text "
        "(the first that matches), before `answer` and `schema_answers` (a second round's prompt, say).",
    )
    schema_answers: bool = Field(
        True,
        description="Answer a request with a JSON schema with the smallest instance of the schema (required "
        "properties only, minItems items, minLength characters, the first enum value), so structured answers parse.",
    )
    chars_per_token: int = Field(
        4,
        ge=1,
        le=64,
        description="Prompt and completion token counts: one token per this many characters (at least one).",
    )
    media_tokens: int = Field(64, ge=0, le=65536, description="Prompt tokens each image or video adds.")
    steps_per_request: int = Field(2, ge=1, le=10_000, description="A request finishes on this step after it joins.")
    step_s: float = Field(0.0, ge=0, le=600, description="Seconds each step takes (a slow engine).")
    poison_seeds: list[int] = Field(
        default_factory=list, description="A running request with one of these sampling seeds kills the engine."
    )
    poison_markers: list[str] = Field(
        default_factory=list, description="A running request whose prompt contains one of these texts kills it."
    )
    poison_colours: list[tuple[int, int, int]] = Field(
        default_factory=list,
        description="A running request with an image whose top-left pixel is one of these RGB colours kills it.",
    )
    crash_on_images: bool = Field(
        False, description="Every running request with an image kills the engine (vllm-ascend #12086 on 310P)."
    )
    hang: bool = Field(False, description="A step with requests running never returns (until healed or closed).")
    gate_file: Path | None = Field(
        None, description="While this file does not exist no request finishes (a long generation held on cue)."
    )
    load_error: str | None = Field(
        None,
        description="The engine fails to load with this message (a RuntimeError, as vLLM's core start fails): "
        "an engine that cannot start.",
    )


class EngineDeadError(VlbatchError):
    """Named as vLLM's (the runner knows it by name): what ``add_request`` raises once the engine has died."""

    code = ENGINE_CRASH


@dataclass
class StubCompletion:
    text: str
    token_ids: list[int]
    finish_reason: str = "stop"


@dataclass
class StubOutput:
    """vLLM's ``RequestOutput`` as far as the runner reads it."""

    request_id: str
    prompt_token_ids: list[int]
    outputs: list[StubCompletion] = field(default_factory=list)
    finished: bool = True


@dataclass
class _Running:
    request: GenerationRequest
    poisoned: bool
    prompt_tokens: int
    age: int = 0


class StubEngine:
    """Finishes each request on its ``steps_per_request``-th step; dies when a poisoned request is running."""

    def __init__(
        self,
        config: StubConfig,
        *,
        gate: threading.Event | None = None,
        step_log: list[list[str]] | None = None,
    ) -> None:
        """``gate``: while cleared no request finishes; ``step_log`` gets the request ids of every step (which ran
        side by side), across the engines that share it."""
        if config.load_error is not None:
            raise RuntimeError(config.load_error)
        self.config = config
        self.gate = gate
        self.step_log = step_log if step_log is not None else []
        self.running: dict[str, _Running] = {}
        self.dead = False  # the core died: every step and new request fails
        self.aborting = False  # told to shut down (a signal to the core): the next step ends every request as aborted
        self._closed = False

    def add_request(self, request_id: str, prompt: dict[str, Any], params: Any) -> None:
        if self.dead:
            raise EngineDeadError("EngineCore encountered an issue")
        if not isinstance(params, GenerationRequest):
            raise TypeError("the stub engine takes each GenerationRequest as its parameters")
        media = prompt.get("multi_modal_data", {})
        images = list(media.get("image", []))
        n_media = len(images) + len(media.get("video", []))
        tokens = self._tokens(prompt["prompt"]) + self.config.media_tokens * n_media
        self.running[request_id] = _Running(params, self._poisoned(params, images), tokens)

    def _poisoned(self, req: GenerationRequest, images: list[Any]) -> bool:
        cfg = self.config
        if images and cfg.crash_on_images:
            return True
        if req.seed is not None and req.seed in cfg.poison_seeds:
            return True
        if any(marker in req.prompt for marker in cfg.poison_markers):
            return True
        colours = {tuple(c) for c in cfg.poison_colours}
        return bool(colours) and any(_corner(img) in colours for img in images)

    def abort_request(self, request_ids: list[str]) -> None:
        for rid in request_ids:
            self.running.pop(rid, None)

    def shutdown(self) -> None:
        """The runner closed this engine: a step stuck in a hang returns."""
        self._closed = True

    def step(self) -> list[StubOutput]:
        if self.config.step_s:
            time.sleep(self.config.step_s)
        while self.config.hang and self.running and not self.dead and not self._closed:
            time.sleep(0.01)
        if self._closed:
            return []
        self.step_log.append(sorted(self.running))
        if self.dead or any(r.poisoned for r in self.running.values()):
            self.dead = True
            raise RuntimeError("EngineCore died")
        if self.aborting:  # as vLLM's core does on SIGTERM: every running request finishes, cut short
            out = [self._output(rid, r, aborted=True) for rid, r in self.running.items()]
            self.running.clear()
            self.dead = True
            return out
        if not self._open():
            time.sleep(0.01)
            return []
        out = []
        for rid, r in list(self.running.items()):
            r.age += 1
            if r.age >= self.config.steps_per_request:
                del self.running[rid]
                out.append(self._output(rid, r))
        return out

    def _open(self) -> bool:
        if self.gate is not None and not self.gate.is_set():
            return False
        return self.config.gate_file is None or self.config.gate_file.exists()

    def _tokens(self, text: str) -> int:
        return max(1, math.ceil(len(text) / self.config.chars_per_token))

    def _output(self, rid: str, r: _Running, *, aborted: bool = False) -> StubOutput:
        req = r.request
        scripted = next((text for marker, text in self.config.answers.items() if marker in req.prompt), None)
        if scripted is not None:
            text = scripted
        elif req.json_schema is not None and self.config.schema_answers:
            text = _json(smallest_instance(req.json_schema))
        else:
            text = self.config.answer
        finish = "stop"
        limit = req.max_tokens * self.config.chars_per_token
        if aborted:
            text, finish = text[: max(1, len(text) // 2)], "abort"
        elif self._tokens(text) > req.max_tokens:
            text, finish = text[:limit], "length"
        return StubOutput(rid, [0] * r.prompt_tokens, [StubCompletion(text, [0] * self._tokens(text), finish)])


def _corner(img: Any) -> tuple[int, ...] | None:
    try:
        pixel = img.convert("RGB").getpixel((0, 0))
    except Exception:  # not a picture the stub can read: never a poison
        return None
    return tuple(pixel) if isinstance(pixel, tuple) else None


def _json(value: Any) -> str:
    import json

    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def smallest_instance(schema: Any, root: Any = None) -> Any:
    """The smallest value ``schema`` accepts, as far as the keywords pipelines use go (``type``, ``properties`` and
    ``required``, ``items``/``minItems``, ``minLength``/``pattern``, ``minimum``, ``enum``, ``const``, ``anyOf``,
    ``oneOf``, ``allOf``, local ``$ref``): null where null is allowed, else the fewest and shortest parts."""
    root = schema if root is None else root
    if not isinstance(schema, dict):
        return None
    if "$ref" in schema:
        return smallest_instance(_resolve(root, str(schema["$ref"])), root)
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if options:
            nullable = [o for o in options if isinstance(o, dict) and o.get("type") == "null"]
            return smallest_instance(nullable[0] if nullable else options[0], root)
    if schema.get("allOf"):
        merged: dict[str, Any] = {}
        for part in schema["allOf"]:
            merged.update(part if isinstance(part, dict) else {})
        return smallest_instance({**merged, **{k: v for k, v in schema.items() if k != "allOf"}}, root)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = "null" if "null" in kind else (kind[0] if kind else None)
    if kind is None:
        kind = "object" if "properties" in schema else "array" if "items" in schema else "null"
    if kind == "object":
        props = schema.get("properties", {})
        return {name: smallest_instance(props.get(name, {}), root) for name in schema.get("required", [])}
    if kind == "array":
        return [smallest_instance(schema.get("items", {}), root) for _ in range(int(schema.get("minItems", 0)))]
    if kind == "string":
        return _smallest_string(schema)
    if kind in ("integer", "number"):
        return _smallest_number(schema, integer=kind == "integer")
    if kind == "boolean":
        return False
    return None


def _resolve(root: Any, ref: str) -> Any:
    if not ref.startswith("#/"):
        return {}
    node = root
    for part in ref[2:].split("/"):
        node = node.get(part, {}) if isinstance(node, dict) else {}
    return node


def _smallest_string(schema: dict[str, Any]) -> str:
    pattern = schema.get("pattern")
    n = int(schema.get("minLength", 0))
    if isinstance(pattern, str):
        # The length a pipeline writes into its pattern (``{min,max}``) when the engine drops minLength beside it.
        bound = re.search(r"\{(\d+),", pattern)
        n = max(n, int(bound.group(1)) if bound else 0)
        for ch in "a0A-_ ":
            try:
                if re.search(pattern, ch * n):
                    return ch * n
            except re.error:
                break
    return "a" * n


def _smallest_number(schema: dict[str, Any], *, integer: bool) -> int | float:
    low = schema.get("minimum")
    if low is None and "exclusiveMinimum" in schema:
        low = schema["exclusiveMinimum"] + (1 if integer else 1e-6)
    value: int | float = 0 if low is None else low
    high = schema.get("maximum")
    if high is not None and value > high:
        value = high
    return math.ceil(value) if integer else value

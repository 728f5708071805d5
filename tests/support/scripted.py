"""The product's stub engine (``engine.runtime.stub``) behind the real ``EngineRunner``, set up as the runner's
and the feeder's tests use it: every request is answered with a fixed text on its second step, and the engine dies
whenever a poisoned (all-black) image is among the requests running. ``Faults`` break every engine a runner loads,
until a test heals them: every image crashes it (as vllm-ascend #12086 does on 310P), or its steps hang.
``scripted_context`` is the worker context the feeder tests run it in.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from engine.runtime.chat import ChatTemplate, Messages
from engine.runtime.config import EngineConfig
from engine.runtime.runner import EngineRunner
from engine.runtime.stub import EngineDeadError, StubConfig, StubEngine
from vlbatch.settings import Settings
from worker.context import WorkerContext


def _render(messages: Messages) -> str:
    parts = []
    for m in messages:
        content = m["content"]
        if isinstance(content, str):
            parts.append(f"[{m['role']}] {content}")
        else:
            parts.append(f"[{m['role']}] " + "".join("<image>" if c["type"] == "image" else c["text"] for c in content))
    return "\n".join(parts) + "\n[assistant] "


CHAT = ChatTemplate(_render, source="scripted")


POISON = (0, 0, 0)  # an all-black image "crashes the engine"
ANSWER = '{"tags": ["sky"]}'


def Faults(*, images: bool = False, poison: bool = True, hang: bool = False) -> StubConfig:
    """What is wrong with the deployment, shared by every engine of a runner: every image crashes it
    (``crash_on_images``), a poisoned (all-black) image does (``poison_colours``), its steps hang (``hang``). A test
    heals it by assigning the stub configuration's fields (``faults.hang = False``, ``faults.poison_colours = []``).
    """
    return StubConfig(
        answer=ANSWER,
        schema_answers=False,
        crash_on_images=images,
        poison_colours=[POISON] if poison else [],
        hang=hang,
    )


def scripted_runner(
    steps: list[list[str]],
    engines: list[StubEngine],
    config: EngineConfig | None = None,
    *,
    step_s: float = 0.0,
    gate: threading.Event | None = None,
    faults: StubConfig | None = None,
) -> EngineRunner:
    """A runner over the product's stub engine (``engine.runtime.stub``): every request is answered ``ANSWER`` on
    its second step, a poisoned image kills the engine; ``steps`` gets every step's batch, ``engines`` every engine
    the runner loads."""
    stub = faults if faults is not None else Faults()
    if step_s:
        stub.step_s = step_s

    def make() -> StubEngine:
        engines.append(StubEngine(stub, gate=gate, step_log=steps))
        return engines[-1]

    return EngineRunner(config or EngineConfig(model="scripted"), engine_factory=make)


def scripted_context(
    sessions: sessionmaker[Session],
    runner: EngineRunner,
    *roots: Path,
    owner: str = "w1",
    revision: str | None = "rev1",
    **settings: Any,
) -> WorkerContext:
    """A feeder's context over a scripted runner: it serves model "m" at ``revision`` as worker ``owner``, reads
    inputs under ``roots`` only (with any other ``settings``), and prepares them on two threads."""
    return WorkerContext(
        settings=Settings(allowed_input_roots=list(roots), **settings),
        sessions=sessions,
        runner=runner,
        model_name="m",
        chat=CHAT,
        owner=owner,
        pool=ThreadPoolExecutor(2),
        model_revision=revision,
    )


ScriptedEngine = StubEngine  # the name the runner's and feeder's tests know it by
__all__ = ["CHAT", "POISON", "EngineDeadError", "Faults", "ScriptedEngine", "scripted_context", "scripted_runner"]

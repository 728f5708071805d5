"""A stand-in engine with vLLM's ``add_request``/``step`` surface, for tests of the runner and the feeder.

It is not a model: it finishes every request on its second step with a fixed answer, and dies whenever a
poisoned (all-black) image is among the requests running. ``Faults`` break every engine a runner loads, until a
test heals them: every image crashes it (as vllm-ascend #12086 does on 310P), or its steps hang.
``scripted_context`` is the worker context the feeder tests run it in.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from engine.runtime.chat import ChatTemplate, Messages
from engine.runtime.config import EngineConfig
from engine.runtime.runner import EngineRunner
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


@dataclass
class _Completion:
    text: str = '{"tags": ["sky"]}'
    token_ids: list[int] = field(default_factory=lambda: [1, 2, 3])
    finish_reason: str = "stop"


@dataclass
class _Output:
    request_id: str
    prompt_token_ids: list[int]
    finished: bool = True
    outputs: list[_Completion] = field(default_factory=lambda: [_Completion()])


@dataclass
class Faults:
    """What is wrong with the deployment, shared by every engine of a runner; a test heals it by clearing them."""

    images: bool = False  # any request with an image crashes the engine
    poison: bool = True  # a poisoned (all-black) image crashes the engine
    hang: bool = False  # a step with requests running never returns (until healed or the engine is dead)


class EngineDeadError(RuntimeError):
    """Named as vLLM's: what its engine client raises on ``add_request`` once the engine core has died."""


class ScriptedEngine:
    """Finishes every request on its second step; dies if a poisoned image is among those running."""

    def __init__(
        self,
        log: list[list[str]],
        *,
        step_s: float = 0.0,
        gate: threading.Event | None = None,
        faults: Faults | None = None,
    ) -> None:
        self.faults = faults or Faults()
        self.running: dict[str, tuple[int, bool]] = {}
        self.log = log  # the batch of every step, across engines
        self.dead = False
        self.step_s = step_s  # the time a step takes, so preprocessing has something to keep up with
        self.gate = gate  # while cleared, no request finishes (a long generation)
        self.aborting = False  # told to shut down: the next step ends every running request as aborted

    def add_request(self, request_id: str, prompt: dict[str, Any], params: Any) -> None:
        if self.dead:
            raise EngineDeadError("EngineCore encountered an issue")
        images = prompt.get("multi_modal_data", {}).get("image", [])
        poisoned = bool(images and self.faults.images) or (
            self.faults.poison and any(img.getpixel((0, 0)) == POISON for img in images)
        )
        self.running[request_id] = (0, poisoned)

    def step(self) -> list[_Output]:
        if self.step_s:
            time.sleep(self.step_s)
        while self.faults.hang and self.running and not self.dead:
            time.sleep(0.01)
        self.log.append(sorted(self.running))
        if self.dead or any(p for _, p in self.running.values()):
            self.dead = True
            raise RuntimeError("EngineCore died")
        out = []
        if self.aborting:  # as vLLM's core does on SIGTERM: every running request finishes, cut short
            out = [_Output(rid, [0] * 10, outputs=[_Completion('{"ta', [1], "abort")]) for rid in self.running]
            self.running.clear()
            self.dead = True
            return out
        if self.gate is not None and not self.gate.is_set():
            time.sleep(0.01)
            return []
        for rid, (age, p) in list(self.running.items()):
            if age >= 1:
                del self.running[rid]
                out.append(_Output(rid, [0] * 10))
            else:
                self.running[rid] = (age + 1, p)
        return out


def scripted_runner(
    steps: list[list[str]],
    engines: list[ScriptedEngine],
    config: EngineConfig | None = None,
    *,
    step_s: float = 0.0,
    gate: threading.Event | None = None,
    faults: Faults | None = None,
) -> EngineRunner:
    def make() -> ScriptedEngine:
        engines.append(ScriptedEngine(steps, step_s=step_s, gate=gate, faults=faults))
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

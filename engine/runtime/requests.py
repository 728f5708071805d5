"""Plain request/result objects exchanged with the engine (no vllm types leak out)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vlbatch.errors import ENGINE_CRASH, ENGINE_STOPPED, VlbatchError


@dataclass(frozen=True)
class GenerationRequest:
    request_id: str
    prompt: str
    images: list[Any] = field(default_factory=list)  # PIL images, already resized
    # Clips as the model's video input: (frames as a uint8 array T x H x W x 3, already resized; metadata)
    videos: list[tuple[Any, dict[str, Any]]] = field(default_factory=list)
    max_tokens: int = 256
    temperature: float = 0.0
    json_schema: dict[str, Any] | None = None
    # Sampling a request body may ask for (OpenAI chat/completions); the defaults are vLLM's.
    top_p: float = 1.0
    seed: int | None = None  # None: the engine's configured seed
    stop: tuple[str, ...] = ()
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    solo: bool = False  # run with nothing else in the engine (a crash suspect being retried)
    segment: Any = None  # the caller's own note (a video segment); the engine never reads it


@dataclass(frozen=True)
class GenerationResult:
    request_id: str
    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str | None


class EngineCrashed(VlbatchError):
    """The engine died while requests were in flight; the caller restarts it and retries."""

    code = ENGINE_CRASH

    def __init__(self, message: str, *, generation: int, in_flight: int) -> None:
        super().__init__(message)
        self.generation = generation
        self.in_flight = in_flight  # 1: the crash can be pinned on that request alone


class EngineStopped(VlbatchError):
    """The runner was closed with requests still queued or running (worker shutdown); nothing crashed."""

    code = ENGINE_STOPPED

"""What a worker process builds once and every part of job execution shares (habit: expensive things once)."""

from __future__ import annotations

import os
import socket
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from sqlalchemy.orm import Session, sessionmaker

from engine.runtime.chat import ChatTemplate
from engine.runtime.runner import EngineRunner
from engine.vision import VideoGeometry, VisionGeometry
from vlbatch.settings import Settings


def default_owner() -> str:
    """A lease owner name unique per context (host, pid and a random token), not only per process: two
    contexts in one process (or a reused pid in another container) never share a lease."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass
class WorkerContext:
    settings: Settings
    sessions: sessionmaker[Session]
    runner: EngineRunner
    model_name: str
    chat: ChatTemplate
    owner: str = field(default_factory=default_owner)
    pool: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(max_workers=4, thread_name_prefix="prep")
    )
    geometry: VisionGeometry = field(default_factory=VisionGeometry)
    video_geometry: VideoGeometry | None = None  # None: the model takes no video input (clips go as images)
    model_revision: str | None = None


def chat_prompt(ctx: WorkerContext, system: str, user: str, *, n_images: int = 0) -> str:
    """The served model's own chat template around a pipeline's system and user text."""
    return ctx.chat.render(system, user, n_images)

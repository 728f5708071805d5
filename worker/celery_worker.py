"""The engine worker: a Celery app whose process holds one engine, built once at start.

Run with the threads pool (concurrency 2) so one task prepares its chunk while the other's requests
decode; prefork children are daemonic and cannot host the engine's processes.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

from celery import Celery, signals

from engine.config import EngineConfig
from engine.runner import EngineRunner
from engine.vision import VisionGeometry
from vlbatch.db.session import make_engine, make_sessionmaker, migrate
from vlbatch.settings import Settings, get_settings
from worker import thermal
from worker.processor import ProcessorContext, process_chunk
from worker.queue import PROCESS_CHUNK, celery_app, queue_name
from worker.reconciler import reconcile_once

log = logging.getLogger(__name__)
_ctx: ProcessorContext | None = None


def _check_devices(settings: Settings, config: EngineConfig) -> None:
    """Invariant 8: refuse to start on chips that are missing, unhealthy or held by another process."""
    from engine.discovery import preflight

    findings = preflight(
        visible=settings.visible_devices, tensor_parallel_size=config.tensor_parallel_size, binary=settings.npu_smi
    )
    for f in findings:
        log.log(logging.ERROR if f.level == "error" else logging.WARNING, "device check: %s", f.message)
    if any(f.level == "error" for f in findings):
        raise SystemExit("device check failed: " + "; ".join(f.message for f in findings if f.level == "error"))


def build_context(settings: Settings) -> ProcessorContext:
    if not settings.model_path:
        raise SystemExit("VLBATCH_MODEL_PATH is not set: an engine worker needs a model directory")
    config = EngineConfig.model_validate({**settings.engine, "model": settings.model_path})
    _check_devices(settings, config)
    migrate(settings.database_url)
    runner = EngineRunner(config)
    runner.load()
    return ProcessorContext(
        settings=settings,
        sessions=make_sessionmaker(make_engine(settings.database_url)),
        runner=runner,
        model_name=settings.served_model_name or "model",
        owner=f"{socket.gethostname()}:{os.getpid()}",
        pool=ThreadPoolExecutor(max_workers=settings.preprocess_threads, thread_name_prefix="prep"),
        geometry=VisionGeometry.from_model_dir(settings.model_path),
    )


def make_worker_app(settings: Settings) -> Celery:
    app = celery_app(settings.broker_url)
    model = settings.served_model_name or "model"
    app.conf.task_queues = None
    app.conf.task_default_queue = queue_name(model, "batch")

    # shared=False: a shared task would be copied into every Celery app made later in this process.
    @app.task(name=PROCESS_CHUNK, bind=True, acks_late=True, reject_on_worker_lost=True, shared=False)
    def process_chunk_task(self: Any, chunk_id: int) -> int:
        assert _ctx is not None, "engine not loaded"
        with thermal.chunk_guard(_ctx.settings, _ctx.sessions, int(chunk_id)):  # waits while a chip is too hot
            return process_chunk(_ctx, int(chunk_id))

    return app


def _reconcile_forever(ctx: ProcessorContext, stop: threading.Event) -> None:
    stale = timedelta(seconds=ctx.settings.lease_seconds)
    while not stop.wait(ctx.settings.reconcile_interval_s):
        try:
            reconcile_once(ctx.settings, ctx.sessions, stale_after=stale)
        except Exception:
            log.exception("reconciler pass failed")


def _heartbeat_forever(ctx: ProcessorContext, path: Path, stop: threading.Event) -> None:
    """Touch ``path`` while the engine is healthy, so an outside check can restart a hung worker."""
    while not stop.wait(min(10.0, ctx.settings.engine_stall_s / 3)):
        if ctx.runner.healthy(max_stall_s=ctx.settings.engine_stall_s):
            path.touch()
        else:
            log.error("engine made no progress for %.0f s; heartbeat withheld", ctx.settings.engine_stall_s)


def main() -> None:
    global _ctx
    settings = get_settings()
    app = make_worker_app(settings)
    stop = threading.Event()

    @signals.worker_ready.connect
    def _start_reconciler(**_: object) -> None:
        assert _ctx is not None
        threading.Thread(target=_reconcile_forever, args=(_ctx, stop), daemon=True).start()
        if settings.heartbeat_file is not None:
            threading.Thread(target=_heartbeat_forever, args=(_ctx, settings.heartbeat_file, stop), daemon=True).start()

    _ctx = build_context(settings)
    model = settings.served_model_name or "model"
    queues = ",".join(queue_name(model, p) for p in settings.worker_queues)
    try:
        app.worker_main(
            [
                "worker",
                "--pool=threads",
                f"--concurrency={settings.worker_concurrency}",
                "--prefetch-multiplier=1",
                "-Q",
                queues,
                "--loglevel=INFO",
                "--without-gossip",
                "--without-mingle",
                *(["-n", settings.celery_node] if settings.celery_node else []),
            ]
        )
    finally:
        stop.set()
        _ctx.runner.close()

"""The engine worker: a Celery app whose process holds one engine and one feeder, built once at start.

A task leases its chunk into the feeder and returns once the chunk is held (it waits while the feeder
is full, which is the back-pressure on the queue). The lease, renewed while the chunk is held, is what
protects the work from here on: if this process dies, the lease lapses and the reconciler sends the
chunk again. On SIGTERM the worker stops claiming, lets held chunks finish for ``drain_timeout_s`` and
hands the rest back. The threads pool is used because prefork children are daemonic and cannot host
the engine's processes.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

from celery import Celery, signals
from celery.exceptions import Reject

from engine.runtime.config import EngineConfig
from engine.runtime.runner import EngineRunner
from jobs.publisher import PROCESS_CHUNK, celery_app, queue_name
from jobs.reconciler import reconcile_forever
from jobs.webhooks import start_sender
from vlbatch.settings import Settings, get_settings
from worker import thermal
from worker.context import WorkerContext
from worker.energy import energy_booker
from worker.feeder import Feeder
from worker.lent_engine import is_lent, lent_for
from worker.startup import build_context

log = logging.getLogger(__name__)
_feeder: Feeder | None = None


def _check_devices(settings: Settings, config: EngineConfig) -> None:
    """Invariant 8: refuse to start on chips that are missing, unhealthy or held by another process."""
    from engine.discovery import preflight

    findings = preflight(
        visible=settings.devices.visible_devices,
        tensor_parallel_size=config.tensor_parallel_size,
        binary=settings.devices.npu_smi,
        platform=settings.devices.platform,
    )
    for f in findings:
        log.log(logging.ERROR if f.level == "error" else logging.WARNING, "device check: %s", f.message)
    if any(f.level == "error" for f in findings):
        raise SystemExit("device check failed: " + "; ".join(f.message for f in findings if f.level == "error"))


def engine_config(settings: Settings) -> EngineConfig:
    """The engine this worker hands vLLM: ``VLBATCH_ENGINE`` with what it leaves unset decided for the model on this
    host (``engine.planning.host_fit``, as ``tag`` and its kin decide it), so a worker with no engine settings starts
    on a CPU host; a setting that cannot start is refused here, in one line, before a load."""
    from engine.planning.host_fit import engine_for_host

    if not settings.model.model_path:
        raise SystemExit("VLBATCH_MODEL_PATH is not set: an engine worker needs a model directory")
    fitted = engine_for_host(settings, settings.model.model_path)
    return EngineConfig.model_validate({**fitted.runtime.engine, "model": settings.model.model_path})


def load_context(settings: Settings) -> WorkerContext:
    config = engine_config(settings)  # exits when VLBATCH_MODEL_PATH is not set
    log.info(
        "engine for %s: max_model_len %d, dtype %s, KV cache %s",
        settings.model.model_path,
        config.max_model_len,
        config.dtype,
        f"{config.kv_cache_memory_bytes} bytes" if config.kv_cache_memory_bytes else "sized by the engine",
    )
    _check_devices(settings, config)
    lent = lent_for(config)  # an engine this process lends (a test session's): taken as it is, never closed here
    if lent is not None:
        log.info("serving %s on the engine lent to this process; not loading one", config.model)
        return build_context(settings, lent, model_dir=config.model, loaded=True)
    runner = EngineRunner(config, load_ledger=settings.runtime.engine_load_ledger)
    return build_context(settings, runner, model_dir=config.model)


def make_worker_app(settings: Settings) -> Celery:
    app = celery_app(settings.broker.broker_url)
    model = settings.model.served_model_name or "model"
    app.conf.task_queues = None
    app.conf.task_default_queue = queue_name(model, "batch")

    # shared=False: a shared task would be copied into every Celery app made later in this process.
    @app.task(name=PROCESS_CHUNK, bind=True, acks_late=True, reject_on_worker_lost=True, shared=False)
    def process_chunk_task(self: Any, chunk_id: int) -> int:
        feeder = _feeder
        assert feeder is not None, "engine not loaded"
        ctx = feeder.ctx
        monitor = thermal.get_monitor(ctx.settings, ctx.sessions)
        if not monitor.wait_until_cool(int(chunk_id)):
            if feeder.stopping:  # woken by the shutdown: back on the queue for another worker
                raise Reject("worker stopping", requeue=True)
            return 0  # still hot: leave the chunk to the reconciler
        ticket = feeder.add_chunk(int(chunk_id))
        if ticket is None:
            if feeder.stopping:  # shutting down: back on the queue for another worker
                raise Reject("worker stopping", requeue=True)
            return 0  # held by another worker, or finished already
        running = monitor.running(ticket.chunk_id)  # chip samples go to this chunk's job while it is held
        running.__enter__()
        ticket.done.add_done_callback(lambda _: running.__exit__(None, None, None))
        return len(ticket.outstanding)

    return app


def _heartbeat_forever(feeder: Feeder, path: Path, stop: threading.Event) -> None:
    """Touch ``path`` while the engine is healthy, so an outside check can restart a hung worker. While the breaker
    is open the worker is alive and reloads the engine itself after its back-off: a restart from outside would only
    load it again sooner."""
    ctx = feeder.ctx
    while not stop.wait(min(10.0, ctx.settings.runtime.engine_stall_s / 3)):
        if feeder.breaker_open or ctx.runner.healthy(max_stall_s=ctx.settings.runtime.engine_stall_s):
            path.touch()
        else:
            log.error("engine made no progress for %.0f s; heartbeat withheld", ctx.settings.runtime.engine_stall_s)


def main() -> None:
    global _feeder
    settings = get_settings()
    app = make_worker_app(settings)
    stop = threading.Event()
    ctx = load_context(settings)
    energy = energy_booker(settings, ctx.sessions, worker=ctx.owner)
    # The broker delivers in send order; claims follow deadlines and fair shares (vlbatch/db/claim_order.py).
    feeder = Feeder(ctx, sample_interval_s=settings.worker.engine_sample_interval_s, energy=energy, in_queue_order=True)
    _feeder = feeder
    # The canary before any claim: a failure opens the breaker, which claims nothing and reloads after its back-off.
    feeder.check_engine()

    @signals.worker_ready.connect
    def _start_reconciler(**_: object) -> None:
        threading.Thread(target=reconcile_forever, args=(settings, ctx.sessions, stop), daemon=True).start()
        start_sender(settings, ctx.sessions, stop)  # webhooks: a thread of its own, off the engine's path
        if settings.worker.heartbeat_file is not None:
            threading.Thread(
                target=_heartbeat_forever, args=(feeder, settings.worker.heartbeat_file, stop), daemon=True
            ).start()

    @signals.worker_shutting_down.connect
    def _stop_claiming(**_: object) -> None:
        feeder.stop_claiming()  # tasks waiting for room give their messages back at once
        thermal.release_waiters()  # and so do tasks waiting for hot chips to cool

    @signals.setup_logging.connect
    def _keep_logging(**_: object) -> None:
        """The process logs through ``vlbatch.logs`` (one line per event, text or JSON, on stderr): Celery adds no
        handler or format of its own, and leaves stdout and stderr as they are."""

    model = settings.model.served_model_name or "model"
    queues = ",".join(queue_name(model, p) for p in settings.worker.worker_queues)
    try:
        app.worker_main(
            [
                "--quiet",  # no start banner: its twenty lines say what the log's first lines say
                "worker",
                "--pool=threads",
                f"--concurrency={settings.worker.worker_concurrency}",
                "--prefetch-multiplier=1",
                "-Q",
                queues,
                "--loglevel=INFO",
                "--without-gossip",
                "--without-mingle",
                *(["-n", settings.broker.celery_node] if settings.broker.celery_node else []),
            ]
        )
    finally:
        stop.set()
        feeder.stop(drain_timeout_s=settings.worker.drain_timeout_s)
        if not is_lent(ctx.runner):
            ctx.runner.close(abandon=True)
        ctx.pool.shutdown(wait=False, cancel_futures=True)

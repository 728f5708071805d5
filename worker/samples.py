"""The feeder's cumulative counters, and the engine samples a worker stores from them every few seconds
(``VLBATCH_ENGINE_SAMPLE_INTERVAL_S``): occupancy, backlog and where the host's time went."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from vlbatch.db.models import EngineSample, utcnow
from worker.context import WorkerContext

log = logging.getLogger(__name__)
_lock = threading.Lock()  # the pool's threads, the writer and the claims add to the counters at once


@dataclass
class FeederStats:
    """Cumulative counters (only grow); benchmarks and samples take differences."""

    items_done: int = 0
    prompt_tokens: int = 0
    output_tokens: int = 0
    prep_images: int = 0
    prep_seconds: float = 0.0
    db_items: int = 0
    db_seconds: float = 0.0

    def add_prep(self, seconds: float, images: int = 0) -> None:
        with _lock:
            self.prep_seconds += seconds
            self.prep_images += images

    def add_db(self, seconds: float, items: int = 0) -> None:
        with _lock:
            self.db_seconds += seconds
            self.db_items += items

    def add_done(self, prompt_tokens: int, output_tokens: int) -> None:
        with _lock:
            self.items_done += 1
            self.prompt_tokens += prompt_tokens
            self.output_tokens += output_tokens


def sample_forever(ctx: WorkerContext, stats: FeederStats, interval_s: float, closed: threading.Event) -> None:
    """Store an engine sample every ``interval_s`` until ``closed``."""
    last = ctx.runner.occupancy()
    while not closed.wait(interval_s):
        snap = ctx.runner.occupancy()
        row = EngineSample(
            worker=ctx.owner,
            model=ctx.model_name,
            sampled_at=utcnow(),
            steps=snap.steps,
            running_sum=snap.running_sum,
            capacity=snap.capacity,
            mean_running=snap.mean_running_since(last),
            backlog=ctx.runner.backlog,
            items_done=stats.items_done,
            output_tokens=stats.output_tokens,
            prep_images=stats.prep_images,
            prep_seconds=stats.prep_seconds,
            db_items=stats.db_items,
            db_seconds=stats.db_seconds,
        )
        last = snap
        try:
            with ctx.sessions() as s:
                s.add(row)
                s.commit()
        except Exception:
            log.exception("engine sample not stored")

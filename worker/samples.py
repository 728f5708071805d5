"""The feeder's cumulative counters, and the engine samples a worker stores from them every few seconds
(``VLBATCH_ENGINE_SAMPLE_INTERVAL_S``): occupancy, backlog and where the host's time went."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from engine.runtime.occupancy import OccupancySnapshot
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
    # Result writes and chunk finishes (the writer thread's, mostly): the items written and the wall seconds.
    db_items: int = 0
    db_seconds: float = 0.0
    # The CPU the same spans took on their own threads' clocks (``time.thread_time``): the service's own cost
    # per item, which waiting on the database or for a core does not inflate.
    db_cpu_seconds: float = 0.0
    # Claims, apart: made on the task threads, once a chunk, and writing no result; counted with the writes they
    # would hide what a write costs.
    claims: int = 0
    claim_seconds: float = 0.0
    claim_cpu_seconds: float = 0.0

    def add_prep(self, seconds: float, images: int = 0) -> None:
        with _lock:
            self.prep_seconds += seconds
            self.prep_images += images

    def add_db(self, seconds: float, items: int = 0, cpu_seconds: float = 0.0) -> None:
        with _lock:
            self.db_seconds += seconds
            self.db_items += items
            self.db_cpu_seconds += cpu_seconds

    def add_claim(self, seconds: float, cpu_seconds: float) -> None:
        """A claim's wall and CPU seconds: kept apart from the writes' (``add_db``), as a claim writes no result."""
        with _lock:
            self.claims += 1
            self.claim_seconds += seconds
            self.claim_cpu_seconds += cpu_seconds

    def add_done(self, prompt_tokens: int, output_tokens: int) -> None:
        with _lock:
            self.items_done += 1
            self.prompt_tokens += prompt_tokens
            self.output_tokens += output_tokens


def sample_forever(ctx: WorkerContext, stats: FeederStats, interval_s: float, closed: threading.Event) -> None:
    """Store an engine sample at start, every ``interval_s``, and once more when ``closed``: the first and the last
    interval of a run count too (a short run's rate is read from them, ``vlbatch.db.rates``)."""
    last = ctx.runner.occupancy()
    _store(ctx, stats, last, last)
    while not closed.wait(interval_s):
        last = _store(ctx, stats, ctx.runner.occupancy(), last)
    _store(ctx, stats, ctx.runner.occupancy(), last)


def _store(
    ctx: WorkerContext, stats: FeederStats, snap: OccupancySnapshot, last: OccupancySnapshot
) -> OccupancySnapshot:
    row = EngineSample(
        worker=ctx.owner,
        model=ctx.model_name,  # dry runs read the measured rate of the workers serving a model
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
        db_cpu_seconds=stats.db_cpu_seconds,
        claims=stats.claims,
        claim_seconds=stats.claim_seconds,
        claim_cpu_seconds=stats.claim_cpu_seconds,
    )
    try:
        with ctx.sessions() as s:
            s.add(row)
            s.commit()
    except Exception:
        log.exception("engine sample not stored")
    return snap

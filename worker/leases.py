"""A worker's leases on chunks: claiming a chunk (its items, under a lease), renewing the leases of the
chunks it holds every quarter lease, finishing a chunk once its items are written, and handing chunks back.

The lease is what protects held work: if the worker dies it lapses, and the reconciler sends the chunk
again. A renewal that finds a chunk taken by another worker only logs it: the items' outcomes are written
only where they are still due.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from vlbatch.db import claim_order, leases
from vlbatch.db.models import Chunk, Item, Job
from worker.context import WorkerContext
from worker.samples import FeederStats
from worker.writer import until_written

log = logging.getLogger(__name__)


@dataclass
class ChunkTicket:
    chunk_id: int
    outstanding: set[int]
    done: Future[int] = field(default_factory=Future)  # items of the chunk this worker finished
    finished: int = 0
    released: bool = False
    items: list[Any] = field(default_factory=list)  # the chunk's held items (worker.held_items.Held)


def emptied_by(tickets: Mapping[int, ChunkTicket], items: Iterable[tuple[int, int]]) -> list[int]:
    """The held chunks (not handed back) whose every outstanding item is among ``items`` (chunk id, item id)."""
    mine: dict[int, set[int]] = {}
    for chunk_id, item_id in items:
        mine.setdefault(chunk_id, set()).add(item_id)
    held = {c: tickets.get(c) for c in mine}
    return sorted(c for c, t in held.items() if t is not None and not t.released and t.outstanding <= mine[c])


class Leases:
    def __init__(
        self,
        ctx: WorkerContext,
        stats: FeederStats,
        *,
        held: Callable[[], list[int]],
        closed: threading.Event,
        in_queue_order: bool = False,
    ) -> None:
        self.ctx = ctx
        self.stats = stats
        self.lease = timedelta(seconds=ctx.settings.scheduling.lease_seconds)
        self.in_queue_order = in_queue_order
        self.shares = claim_order.Shares(
            weights=ctx.settings.scheduling.tenant_shares,
            window=timedelta(seconds=ctx.settings.scheduling.fair_share_window_s),
        )
        self._held = held  # the chunks to renew: held, not handed back, with items left
        self._closed = closed
        self._thread = threading.Thread(target=self._renew_loop, name="feeder-leases", daemon=True)
        self._thread.start()

    def claim(self, chunk_id: int) -> tuple[int, list[Item], Job | None]:
        """Lease a chunk: the chunk leased, its items still due, and its job (None: nothing was leased).

        In queue order (the engine worker) the delivered chunk is a turn to claim the queue's best free chunk
        (``vlbatch/db/claim_order.py``), which may be another one; otherwise the delivered chunk itself."""
        started, cpu = time.perf_counter(), time.thread_time()
        with self.ctx.sessions() as s:
            served = self.ctx.model_name
            if self.in_queue_order:
                leased, items = claim_order.claim_next(
                    s,
                    delivered=chunk_id,
                    owner=self.ctx.owner,
                    lease=self.lease,
                    shares=self.shares,
                    model=served,
                )
            else:
                leased, items = (
                    chunk_id,
                    leases.claim_chunk(s, chunk_id=chunk_id, owner=self.ctx.owner, lease=self.lease, model=served),
                )
            if items:
                job = s.get(Job, items[0].job_id)
            else:  # nothing left to run: a chunk of ours may still have to be finished
                chunk = s.get(Chunk, leased if leased is not None else chunk_id)
                chunk_job = s.get(Job, chunk.job_id) if chunk is not None else None
                job = chunk_job if chunk is not None and chunk.lease_owner == self.ctx.owner else None
                asked = chunk_job.model if chunk_job is not None and job is None else None
                if asked is not None and asked != served:  # a message on the wrong queue: another model's chunk
                    log.warning("chunk %d is for model %r; this worker serves %r: not claimed", chunk_id, asked, served)
            s.commit()
        self.stats.add_claim(time.perf_counter() - started, cpu_seconds=time.thread_time() - cpu)
        return leased if leased is not None else chunk_id, items, job

    def finish(self, chunk_id: int) -> None:
        started, cpu = time.perf_counter(), time.thread_time()

        def write() -> None:
            with self.ctx.sessions() as s:
                leases.finish_chunk(s, chunk_id=chunk_id, owner=self.ctx.owner)
                s.commit()

        until_written(write, what=f"chunk {chunk_id}'s end", closed=self._closed)
        self.stats.add_db(time.perf_counter() - started, cpu_seconds=time.thread_time() - cpu)

    def release(self, chunk_ids: list[int]) -> None:
        """Hand chunks back for another worker: their leases end now."""
        with self.ctx.sessions() as s:
            leases.release_chunks(s, chunk_ids=chunk_ids, owner=self.ctx.owner)
            s.commit()
        log.warning("handed %d unfinished chunks back for another worker: %s", len(chunk_ids), chunk_ids)

    def join(self) -> None:
        self._thread.join(30)

    def _renew_loop(self) -> None:
        every = max(1.0, self.lease.total_seconds() / 4)
        while not self._closed.wait(every):
            ids = self._held()
            if not ids:
                continue
            try:
                with self.ctx.sessions() as s:
                    kept = leases.renew_leases(s, chunk_ids=ids, owner=self.ctx.owner, lease=self.lease)
                    s.commit()
            except Exception:
                log.exception("lease renewal failed for %d chunks", len(ids))
                continue
            for cid in set(ids) - kept:
                log.warning("chunk %d: lease lost to another worker; its results are written only if still due", cid)

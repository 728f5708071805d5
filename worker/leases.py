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
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from vlbatch.db import leases
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
    items: list[Any] = field(default_factory=list)  # the chunk's held items (worker.items.Held)


class Leases:
    def __init__(
        self,
        ctx: WorkerContext,
        stats: FeederStats,
        *,
        held: Callable[[], list[int]],
        closed: threading.Event,
    ) -> None:
        self.ctx = ctx
        self.stats = stats
        self.lease = timedelta(seconds=ctx.settings.lease_seconds)
        self._held = held  # the chunks to renew: held, not handed back, with items left
        self._closed = closed
        self._thread = threading.Thread(target=self._renew_loop, name="feeder-leases", daemon=True)
        self._thread.start()

    def claim(self, chunk_id: int) -> tuple[list[Item], Job | None]:
        """The chunk's items still due, leased to this worker, and its job (None: another worker holds it)."""
        started = time.perf_counter()
        with self.ctx.sessions() as s:
            items = leases.claim_chunk(s, chunk_id=chunk_id, owner=self.ctx.owner, lease=self.lease)
            chunk = s.get(Chunk, chunk_id)
            job = s.get(Job, chunk.job_id) if chunk is not None and chunk.lease_owner == self.ctx.owner else None
            s.commit()
        self.stats.add_db(time.perf_counter() - started)
        return items, job

    def finish(self, chunk_id: int) -> None:
        started = time.perf_counter()

        def write() -> None:
            with self.ctx.sessions() as s:
                leases.finish_chunk(s, chunk_id=chunk_id, owner=self.ctx.owner)
                s.commit()

        until_written(write, what=f"chunk {chunk_id}'s end", closed=self._closed)
        self.stats.add_db(time.perf_counter() - started)

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

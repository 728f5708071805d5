"""The one crash policy, for items of every kind (invariant 5): a thread that takes the engine crashes the
feeder's items saw, restarts the engine once per crash, and retries each crashed request.

A crash restarts the engine once, however many items saw it; the requests that were in it are retried
solo, so a crash is pinned on the item that causes it. An item that crashes the engine while running alone
books it in ``items.crash_count`` (kept across redeliveries) and fails as ``engine_crash`` at
``MAX_CRASHES_PER_ITEM``. A crash that a stop follows within ``SHUTDOWN_GRACE_S`` restarts nothing and
blames no one: its items go back with their chunks.

The breaker (``worker/breaker.py``) sees every crash charged to an item: several in a row, on different items,
are the deployment's, not the items'. So an item that crashed alone is retried after the other crashed requests
(the next one alone is then another item), and no restart goes past the worker's restart budget.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import replace

from engine.runtime.requests import EngineCrashed, GenerationRequest
from vlbatch.db import leases
from vlbatch.errors import ENGINE_CRASH
from worker.breaker import Breaker
from worker.context import WorkerContext
from worker.held_items import Held

log = logging.getLogger(__name__)

MAX_CRASHES_PER_ITEM = 2
# A stop signal sent to the worker's process group (systemd's default, a supervisor's killpg) reaches the
# engine's processes as soon as the worker: the engine then looks crashed a moment before the worker hears it
# is stopping. A crash waits this long for a stop before it restarts the engine and blames anyone.
SHUTDOWN_GRACE_S = 3.0


class CrashPolicy:
    def __init__(
        self,
        ctx: WorkerContext,
        *,
        stop_requested: threading.Event,
        released: Callable[[int], bool],
        resubmit: Callable[[Held, int, GenerationRequest], None],
        fail: Callable[[Held, str, str], None],
        breaker: Breaker,
    ) -> None:
        self.ctx = ctx
        self._breaker = breaker
        # Items that crashed alone, retried once the crash reports queued behind them are handled: the next solo run
        # is then another item, and a deployment that crashes on everything shows as a streak of different items.
        self._deferred: list[tuple[Held, int, GenerationRequest]] = []
        self._stop_requested = stop_requested  # the feeder is stopping
        self._released = released  # the item's chunk was handed back: nothing to do
        self._resubmit = resubmit  # request k of the item's round again
        self._fail = fail
        self._graced_generation = 0  # the last crashed engine generation that waited SHUTDOWN_GRACE_S
        self._crashes: queue.Queue[tuple[Held, int, EngineCrashed] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name="feeder-crashes", daemon=True)
        self._thread.start()

    def report(self, held: Held, k: int, crash: EngineCrashed) -> None:
        """Request ``k`` of the item's round ended in a crash."""
        self._crashes.put((held, k, crash))

    def close(self) -> None:
        self._crashes.put(None)
        self._thread.join(30)

    def forget(self) -> None:
        """The breaker handed every held item back: none of the deferred retries is due any more."""
        self._deferred.clear()

    def _loop(self) -> None:
        while (entry := self._crashes.get()) is not None:
            held, k, crash = entry
            try:
                self._handle(held, k, crash)
                if self._crashes.empty():
                    deferred, self._deferred = self._deferred, []
                    for h, i, req in deferred:
                        if not h.finished and not self._released(h.chunk_id):
                            self._resubmit(h, i, req)
            except Exception:  # a failure here must not stop crash handling for the other items
                if self._stop_requested.is_set():  # e.g. the restart failed because the worker is going down
                    log.warning("item %d: engine not restarted while stopping; left for another worker", held.id)
                    continue
                log.exception("crash handling failed for item %d", held.id)
                self._fail(held, ENGINE_CRASH, "crash handling failed; see the worker log")

    def _handle(self, held: Held, k: int, crash: EngineCrashed) -> None:
        if held.finished or self._released(held.chunk_id):
            return
        if crash.generation != self._graced_generation:  # once per crashed engine, not once per item
            self._graced_generation = crash.generation
            self._stop_requested.wait(SHUTDOWN_GRACE_S)
        if self._stop_requested.is_set():
            # Shutting down: the stop signal often reaches the engine's processes too. Loading a new engine now
            # would hold the exit for a minute; the item stays unanswered and the stop hands its chunk back.
            log.warning("item %d: engine gone while stopping; left for another worker", held.id)
            return
        if self._breaker.is_open:  # the items went back uncharged; the breaker reloads the engine
            return
        alone = crash.in_flight == 1
        if alone:  # it ran alone: the crash is its own, unless the breaker finds the deployment broken
            held.crash_count += 1
            with self.ctx.sessions() as s:
                leases.record_crashes(s, item_id=held.id, crash_count=held.crash_count)
                s.commit()
            if self._breaker.crashed_alone(held.id):
                self._breaker.open(f"crashes on every item it runs ({self._breaker.k} in a row, each alone)")
                return
        # The first report of a crash restarts the engine; the others of the same generation do not.
        if crash.generation == self.ctx.runner.generation:
            spent = self._breaker.over_budget()
            if spent is not None:
                self._breaker.open(spent)
                return
            self.ctx.runner.restart(crashed_generation=crash.generation)
            self._breaker.loaded()
        if alone and held.crash_count >= MAX_CRASHES_PER_ITEM:
            msg = f"the engine crashed {held.crash_count} times while running this item alone"
            self._fail(held, ENGINE_CRASH, msg)
            return
        if crash.in_flight:
            held.suspect = True
        held.retries += 1
        log.warning(
            "item %d: engine crashed with %d requests in flight; retrying%s",
            held.id,
            crash.in_flight,
            " alone" if held.suspect else "",
        )
        req = held.requests[k]
        retry = replace(req, request_id=f"{req.request_id}-r{held.retries}", solo=held.suspect)
        if alone:
            self._deferred.append((held, k, retry))
        else:
            self._resubmit(held, k, retry)

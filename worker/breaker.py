"""The feeder's breaker: tells a broken deployment from a poisoned item, for items of every kind.

An item's crash is pinned on it by running it alone (``worker/crashes.py``). When ``VLBATCH_BREAKER_CRASHES`` (K)
crashes in a row each ran alone, on K different items, with no answer between, the engine is what fails, not the
items (vllm-ascend #12086 kills a 310P engine on every image). So is an engine that fails the canary after a load
(``engine/canary.py``), and a worker past its restart budget (``VLBATCH_ENGINE_LOADS_PER_HOUR``). Then the breaker
opens: no claim; the feeder hands every held item back uncharged (the streak's crash counts given back, an item
the streak failed queued again); the worker's ``engine_states`` row says why (/readyz, the jobs' ``stalled``, the
metrics). After a back-off (doubling, capped) the engine is reloaded and the canary runs; it closes the breaker
when it passes. An embedded run has no other worker to wait for: when the canary fails after the back-off it
gives up (``gave_up``), and the run stops with ``engine_canary_failed``, its items still queued.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Callable

from engine.canary import CanaryResult, canary_requests, crash_remedies, run_canary
from vlbatch.db import engine_states, leases
from vlbatch.errors import ENGINE_CANARY_FAILED, VlbatchError
from worker.context import WorkerContext
from worker.leases import ChunkTicket

log = logging.getLogger(__name__)

HOUR_S = 3600.0


class EngineBroken(VlbatchError):
    """The engine crashes or hangs on every request of a kind, not on one item: nothing was claimed for it."""

    code = ENGINE_CANARY_FAILED


class Breaker:
    def __init__(
        self,
        ctx: WorkerContext,
        *,
        hand_back: Callable[[Counter[int]], None],
        changed: Callable[[], None],
        closed: threading.Event,
        give_up: bool = False,
    ) -> None:
        s = ctx.settings
        self.ctx = ctx
        self.k = s.breaker.breaker_crashes
        self._hand_back = hand_back  # release every held item; give back the streak's charges (item id: crashes)
        self._changed = changed  # the breaker opened, closed or gave up: wake whoever waits to claim
        self._closed = closed  # the feeder is closing: no more reloads
        self._give_up = give_up
        self._lock = threading.Lock()
        self._streak: list[int] = []  # the items of the crashes in a row that each ran alone
        self._charges: Counter[int] = Counter()  # crashes charged to items since the last answer
        self._loads: deque[float] = deque([time.monotonic()])  # the engine was loaded before the feeder was made
        self._backoff = s.breaker.breaker_backoff_s
        self.is_open = False
        self.reason: str | None = None
        self.gave_up: str | None = None  # the message an embedded run stops with
        self._recovery: threading.Thread | None = None

    # ------------------------------------------------------------------------- the streak and the budget

    def answered(self) -> None:
        """An engine answer came back: the crashes before it were not the deployment's."""
        if self._streak or self._charges:
            with self._lock:
                self._streak.clear()
                self._charges.clear()

    def crashed_alone(self, item_id: int) -> bool:
        """A crash charged to ``item_id`` (it ran alone). True when the streak opens the breaker."""
        with self._lock:
            self._charges[item_id] += 1
            self._streak.append(item_id)
            return len(set(self._streak)) >= self.k

    def over_budget(self) -> str | None:
        """Why one more engine load is refused (the restart budget is spent), or None."""
        now = time.monotonic()
        while self._loads and now - self._loads[0] > HOUR_S:
            self._loads.popleft()
        limit = self.ctx.settings.breaker.engine_loads_per_hour
        if len(self._loads) >= limit:
            return f"was loaded {len(self._loads)} times in the last hour (VLBATCH_ENGINE_LOADS_PER_HOUR={limit})"
        return None

    def loaded(self) -> None:
        self._loads.append(time.monotonic())

    # ------------------------------------------------------------------------------ opening and closing

    def check(self) -> bool:
        """Run the canary on the loaded engine; a failure opens the breaker. True when it passed."""
        result = self.canary()
        if result.ok:
            self._report(engine_states.OK, None)
            return True
        self.open(result.reason or "fails the canary")
        return False

    def canary(self) -> CanaryResult:
        ctx = self.ctx
        images = ctx.runner.config.limit_images_per_prompt > 0
        tag = f"{ctx.runner.generation}-{time.monotonic_ns()}"
        reqs = canary_requests(ctx.chat.render, ctx.geometry, images=images, tag=tag)
        result = run_canary(ctx.runner, reqs, timeout_s=ctx.settings.runtime.canary_timeout_s)
        if result.ok:
            log.info("engine canary passed in %.1f s", result.seconds)
            self.answered()
        return result

    def open(self, reason: str) -> None:
        """No more claims; held items go back uncharged; the engine is reloaded after the back-off."""
        with self._lock:
            if self.is_open:
                return
            self.is_open, self.reason = True, reason
            charges, self._charges = self._charges, Counter()
            self._streak.clear()
        self._changed()
        remedies = crash_remedies(self.ctx.settings.devices.platform, npu_smi=self.ctx.settings.devices.npu_smi)
        log.error(
            "%s: the engine %s; breaker open, nothing is claimed, held items go back uncharged; reload in %.0f s%s",
            ENGINE_CANARY_FAILED,
            reason,
            self._backoff,
            "".join(f"\n  remedy: {r}" for r in remedies),
        )
        try:
            self._hand_back(charges)
        finally:
            self._report(engine_states.BROKEN, reason)
            self._recovery = threading.Thread(target=self._recover, name="feeder-breaker", daemon=True)
            self._recovery.start()

    def _recover(self) -> None:
        while not self._closed.wait(self._backoff):
            self._backoff = min(self._backoff * 2, self.ctx.settings.breaker.breaker_backoff_max_s)
            try:
                self.ctx.runner.close(abandon=True)
                self.ctx.runner.load()
                self.loaded()
                result = self.canary()
            except Exception as exc:  # a load that fails is a broken engine too
                log.exception("engine reload failed")
                result = CanaryResult(False, f"fails to load ({exc})")
            if self._closed.is_set():
                return
            if result.ok:
                with self._lock:
                    self.is_open, self.reason = False, None
                    self._backoff = self.ctx.settings.breaker.breaker_backoff_s
                self._report(engine_states.OK, None)
                log.warning("engine canary passed after a reload: breaker closed, claiming again")
                self._changed()
                return
            self.reason = result.reason or "fails the canary"
            self._report(engine_states.BROKEN, self.reason)
            if self._give_up:
                self.gave_up = self.message()
                log.error("%s", self.gave_up)
                self._changed()
                return
            log.error("engine canary failed again (%s); next reload in %.0f s", self.reason, self._backoff)

    def message(self) -> str:
        """What an embedded run stops with: what fails, and the platform's known remedies."""
        remedies = crash_remedies(self.ctx.settings.devices.platform, npu_smi=self.ctx.settings.devices.npu_smi)
        text = f"the engine {self.reason}, after a reload too; nothing was claimed for it, the items stay queued"
        return text + "".join(f"; remedy: {r}" for r in remedies)

    def close(self) -> None:
        """The feeder stops: the worker's row goes, but for an embedded run that gave up, whose row says why
        (to the next run, or an API on the same database)."""
        if self._recovery is not None:
            self._recovery.join(30)
        if self.gave_up is None:
            try:
                with self.ctx.sessions() as s:
                    engine_states.forget(s, owner=self.ctx.owner)
                    s.commit()
            except Exception:
                log.warning("engine state not removed", exc_info=True)

    def _report(self, state: str, reason: str | None) -> None:
        try:
            with self.ctx.sessions() as s:
                engine_states.report(s, owner=self.ctx.owner, model=self.ctx.model_name, state=state, reason=reason)
                s.commit()
        except Exception:  # the state is for the operator; a database hiccup must not stop the breaker
            log.warning("engine state not recorded", exc_info=True)


def give_back(ctx: WorkerContext, tickets: list[ChunkTicket], charges: Counter[int]) -> None:
    """The breaker opened: release the held chunks (their items queued again) and give the streak's crash charges
    back (``leases.hand_back``)."""
    for t in tickets:
        t.released = True
    ids = [t.chunk_id for t in tickets]
    with ctx.sessions() as s:
        requeued = leases.hand_back(s, chunk_ids=ids, owner=ctx.owner, charges=charges)
        s.commit()
    log.warning("breaker open: handed back %d chunks; %d failed items queued again", len(ids), requeued)
    for t in tickets:
        if not t.done.done():
            t.done.set_result(t.finished)

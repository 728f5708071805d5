"""The continuous feeder: keeps one engine full from leased chunks, for the Celery worker and the embedded
runner alike, with one execution path for every kind of item.

A chunk is a unit of claiming and acknowledgement, not a barrier. ``add_chunk`` waits only until fewer
than ``hold`` engine requests are in flight (and fewer than ``2 * hold`` items await their writes: a database
stall of a second must not starve the engine, nor an outage grow memory), then leases the chunk
(``worker/leases.py``) and hands every item to the preprocessing pool. An item runs as rounds of engine
requests (``worker/rounds.py``): a photo, a clip or a request line is one round; a document is OCR, map and
its pipeline's own rounds. A round's requests go straight to the engine runner, which keeps
``max_num_seqs`` running with a few more waiting inside the engine and the rest, prepared, in its backlog.
When a round's answers are all back, the round's ``then`` gives the next round or the item's outcome.
Outcomes are written by one writer thread in batches (``worker/writer.py``); a chunk is finished the moment
its last item is written. ``stop`` stops claiming, lets held work finish for a bounded time, then hands
what is left back to the database for another worker.

Failures stay with their item (invariant 4): an input error, a parse error or an engine refusal is that
item's error code. Engine crashes go to the one crash policy (``worker/crashes.py``, invariant 5), and the
breaker (``worker/breaker.py``) tells a broken deployment from a poisoned item: while it is open nothing is
claimed and held items are handed back uncharged.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from engine.runtime.requests import EngineCrashed, GenerationRequest, GenerationResult
from preprocessing.input_errors import InputError
from vlbatch.db import outcomes
from vlbatch.errors import ENGINE_REJECTED, PARSE_ERROR, PREPROCESS_ERROR
from worker.breaker import Breaker, EngineBroken, give_back
from worker.context import WorkerContext
from worker.crashes import MAX_CRASHES_PER_ITEM, SHUTDOWN_GRACE_S, CrashPolicy
from worker.energy import EnergyBooker
from worker.held_items import Held, JobPlans, first_step, held_of
from worker.leases import ChunkTicket, Leases
from worker.reuse import Duplicates, ReuseKey, copy_of
from worker.rounds import Round, Step, Waiting, failure
from worker.samples import FeederStats, sample_forever
from worker.writer import ResultWriter, Written

__all__ = ["MAX_CRASHES_PER_ITEM", "SHUTDOWN_GRACE_S", "ChunkTicket", "EngineBroken", "Feeder", "FeederStats"]

log = logging.getLogger(__name__)


class Feeder:
    def __init__(
        self,
        ctx: WorkerContext,
        *,
        hold: int | None = None,
        write_batch: int = 256,
        # Half a second of answers per write: a write costs a few round trips whatever its size, and the writer
        # thread waits for the interpreter lock after each one; a crash redoes at most this much work.
        write_interval_s: float = 0.5,
        on_written: Callable[[int], None] | None = None,
        sample_interval_s: float | None = None,
        energy: EnergyBooker | None = None,
        in_queue_order: bool = False,
        give_up: bool = False,
    ) -> None:
        """``in_queue_order``: a delivered chunk id is a turn to claim its queue's best free chunk (the engine
        worker, whose broker delivers in send order); otherwise exactly the chunk given (the embedded runner).
        ``give_up``: an embedded run, with no other worker to wait for; when the engine fails its canary after
        the breaker's back-off, claims end (``wait_for_room`` is False) and ``broken`` says why."""
        cfg = ctx.runner.config
        self.ctx = ctx
        ctx.runner.stall_s = ctx.settings.runtime.engine_stall_s  # a hung engine is a crash: restarted, counted
        # Books the chips' energy to the jobs by their tokens; the feeder starts and stops it.
        self.energy = energy
        # Engine requests in flight: enough to keep admission_limit in the engine plus a prepared backlog of
        # max_num_seqs.
        self.hold = hold or cfg.admission_limit + cfg.max_num_seqs
        self.stats = FeederStats()
        self._on_written = on_written
        self._cond = threading.Condition()
        self._held = 0  # items claimed and not yet written
        # The one back-pressure count: per item not yet answered, its requests in the engine (one while it is
        # prepared, none between rounds). Room is freed when answers are back, not when they are written: a
        # database that stalls for a second must not starve the engine. Items awaiting their write are
        # bounded by ``2 * hold``.
        self._weights: dict[int, int] = {}
        self._working = 0
        self._tickets: dict[int, ChunkTicket] = {}
        # One claim at a time: a claim in queue order may lease another chunk than the one delivered, perhaps one
        # another task was delivered; each ticket is filed under the chunk it leased, once.
        self._claiming = threading.Lock()
        self._plans = JobPlans(ctx)
        self._duplicates: Duplicates[Held] = Duplicates(ctx.sessions)  # duplicates run once (worker/reuse.py)
        self._stopping = False
        self.handed_back = False  # the breaker handed held chunks back since the owner last cleared this
        self._stop_requested = threading.Event()  # set with _stopping, for waits that a stop should cut short
        self._closed = threading.Event()
        self._writer = ResultWriter(
            ctx,
            self.stats,
            take=self._take,
            released=self._released,
            written=self._written,
            closed=self._closed,
            batch=write_batch,
            interval_s=write_interval_s,
        )
        self._breaker = Breaker(
            ctx, hand_back=self._hand_back, changed=self._wake, closed=self._closed, give_up=give_up
        )
        self._crashes = CrashPolicy(
            ctx,
            stop_requested=self._stop_requested,
            released=self._released,
            resubmit=self._submit,
            fail=self._fail,
            breaker=self._breaker,
        )
        self._leases = Leases(ctx, self.stats, held=self._renewable, closed=self._closed, in_queue_order=in_queue_order)
        self._sampler: threading.Thread | None = None
        if sample_interval_s:
            self._sampler = threading.Thread(
                target=sample_forever,
                args=(ctx, self.stats, sample_interval_s, self._closed),
                name="feeder-samples",
                daemon=True,
            )
            self._sampler.start()
        if energy is not None:
            energy.start()

    # ------------------------------------------------------------------------------------ claiming

    @property
    def held_items(self) -> int:
        return self._held

    @property
    def stopping(self) -> bool:
        return self._stopping

    @property
    def breaker_open(self) -> bool:
        return self._breaker.is_open

    @property
    def broken(self) -> str | None:
        """Why this embedded run stops claiming for good: the engine failed its canary after the back-off."""
        return self._breaker.gave_up

    def check_engine(self) -> bool:
        """The canary on the loaded engine, before any claim; a failure opens the breaker. True when it passed."""
        return self._breaker.check()

    def _wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def wait_for_room(self, timeout: float | None = None) -> bool:
        """Block while ``hold`` requests or more are in flight (or ``2 * hold`` items await their writes), or
        while the breaker is open; False on timeout, when stopping, or when the breaker gave up."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while (
                not self._stopping
                and not self._breaker.gave_up
                and (self._breaker.is_open or self._working >= self.hold or self._held >= 2 * self.hold)
            ):
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(min(1.0, left) if left is not None else 1.0)
            return not self._stopping and not self._breaker.gave_up

    def add_chunk(self, chunk_id: int) -> ChunkTicket | None:
        """Wait for room, lease ``chunk_id`` (in queue order: the queue's best free chunk, the ticket's
        ``chunk_id``) and start its items. None when stopping or when nothing was leased; a chunk this feeder
        already holds returns its ticket."""
        if not self.wait_for_room():
            return None
        with self._claiming:
            with self._cond:
                if chunk_id in self._tickets:  # held already: a second message for it
                    return self._tickets[chunk_id]
            leased, items, job = self._leases.claim(chunk_id)
            with self._cond:
                if leased in self._tickets:  # this feeder's own lease, found again in queue order
                    return self._tickets[leased]
                chunk_id = leased
                ticket = ChunkTicket(chunk_id, set())
                self._tickets[chunk_id] = ticket
        plan = self._plans.of(job) if job is not None else None
        if not items or plan is None:
            with self._cond:
                self._tickets.pop(chunk_id, None)
            if plan is not None:  # leased, but nothing left: a worker died after its last write
                self._finish(ticket)  # sets the ticket's result
            if not ticket.done.done():
                ticket.done.set_result(0)
            return None if plan is None else ticket
        held = [held_of(it, plan) for it in items]
        ticket.items = held
        if self._breaker.is_open:  # opened during the claim: handed back as the rest were, uncharged
            with self._cond:
                self._tickets.pop(chunk_id, None)
            self.handed_back = True
            give_back(self.ctx, [ticket], Counter())
            return None
        with self._cond:
            ticket.outstanding = {h.id for h in held}
            self._held += len(held)
            self._working += len(held)
            self._weights.update((h.id, 1) for h in held)
        for h in held:
            if plan.error is not None:
                self._fail(h, *plan.error)
            else:
                self._start(h)
        return ticket

    def _start(self, held: Held) -> None:
        self.ctx.pool.submit(self._first, held).add_done_callback(lambda fut: self._stepped(held, fut))

    # --------------------------------------------------------------------------------- rounds

    def _first(self, held: Held) -> Step | Waiting:
        # CPU seconds of this pool thread: waiting for a core or the GIL is not preprocessing cost, and the
        # figure then compares with vlbatch bench's raw arm, which counts the same way.
        started = time.thread_time()
        try:
            return first_step(self.ctx, held, reuse=self._reuse)
        finally:
            self.stats.add_prep(time.thread_time() - started, len(held.sources))

    def _reuse(self, held: Held) -> outcomes.Outcome | Waiting | None:
        """An image item whose bytes are hashed: a copy of an answer to the same bytes, a wait for one, or None."""
        assert held.content_hash is not None
        job = held.plan.job
        key = ReuseKey(job.tenant, held.content_hash, held.plan.marker)
        return self._duplicates.check(held, item_id=held.id, job_id=job.id, key=key)

    def _then(self, held: Held, step: Round, results: list[GenerationResult]) -> Step | Waiting:
        started = time.thread_time()
        try:
            return step.then(results)
        finally:
            self.stats.add_prep(time.thread_time() - started)

    def _stepped(self, held: Held, fut: Future[Step | Waiting]) -> None:
        """A step made in the preprocessing pool is done: start its round, or hand its outcome to the writer."""
        exc = fut.exception()
        if isinstance(exc, InputError):
            self._fail(held, exc.code, exc.message)
        elif exc is not None:  # an unexpected decoder failure is still one item's failure
            self._fail(held, PREPROCESS_ERROR, repr(exc))
        else:
            self._next(held, fut.result())

    def _next(self, held: Held, step: Step | Waiting) -> None:
        if held.finished:  # handed back by the breaker while it was prepared
            return
        if isinstance(step, Waiting):  # a duplicate of a held item: its answer comes with that item's
            self._answered(held.id)
            return
        if isinstance(step, outcomes.Outcome):
            self._answered(held.id)
            self._writer.put(("done", held, step))
            return
        if not step.requests:  # nothing would ever answer it: the item would hold its chunk for ever
            self._fail(held, PREPROCESS_ERROR, "the item made no engine request")
            return
        with self._cond:
            held.round, held.results, held.answered = step, {}, set()
            self._weigh(held.id, len(step.requests))
        for k, req in enumerate(step.requests):
            self._submit(held, k, req)

    def _submit(self, held: Held, k: int, req: GenerationRequest) -> None:
        (fut,) = self.ctx.runner.submit([req])
        fut.add_done_callback(lambda f: self._answer(held, k, f))

    def _answer(self, held: Held, k: int, fut: Future[GenerationResult]) -> None:
        """A request's future is done (on the engine's thread): the item's room is free once every request of
        its round has an answer; a crash is none (the crash policy retries or fails the item)."""
        if fut.cancelled() or not isinstance(fut.exception(), EngineCrashed):
            with self._cond:
                held.answered.add(k)
                if len(held.answered) >= len(held.requests):
                    self._weigh(held.id, 0)
        self._writer.put(("answer", held, k, fut))

    def _fail(self, held: Held, code: str, message: str) -> None:
        self._answered(held.id)
        self._writer.put(("done", held, failure(held.id, held.plan.job.id, code, message)))

    def _weigh(self, item_id: int, weight: int) -> None:
        """Under ``_cond``: the item's share of the back-pressure count is now ``weight``."""
        if item_id in self._weights:
            self._working += weight - self._weights[item_id]
            self._weights[item_id] = weight
            self._cond.notify_all()

    def _answered(self, item_id: int) -> None:
        with self._cond:
            weight = self._weights.pop(item_id, None)
            if weight is not None:
                self._working -= weight
                self._cond.notify_all()

    def _book(self, held: Held, results: list[GenerationResult]) -> None:
        # Booked as each round's answers arrive, so a long document's energy falls in the intervals it ran in
        # (and tokens spent on an item that fails later still cost what they cost).
        if self.energy is not None:
            tokens = sum(r.prompt_tokens + r.completion_tokens for r in results)
            self.energy.ledger.add_tokens(held.plan.job.id, tokens)

    # ---------------------------------------------------------------------- on the writer's thread

    def _take(self, event: tuple[Any, ...]) -> Written | None:
        """An event becomes the outcome to write, or None while the item goes on (or is left to a stop)."""
        held: Held = event[1]
        if event[0] == "done":
            return self._final(held, event[2])
        k, fut = event[2], event[3]
        if held.finished or fut.cancelled():
            return None
        exc = fut.exception()
        if exc is not None and self._stopping:  # the engine went with the shutdown: not the item's fault
            return None  # left unanswered; stop() hands its chunk back
        if isinstance(exc, EngineCrashed):
            self._crashes.report(held, k, exc)
            return None
        if exc is not None:  # refused by the engine (e.g. prompt over max_model_len)
            return self._final(held, failure(held.id, held.plan.job.id, ENGINE_REJECTED, str(exc)))
        held.results[k] = fut.result()
        self._breaker.answered()
        if len(held.results) < len(held.requests):
            return None
        step = held.round
        assert step is not None
        results = [held.results[i] for i in range(len(step.requests))]
        self._book(held, results)
        if step.blocking:
            self.ctx.pool.submit(self._then, held, step, results).add_done_callback(lambda f: self._stepped(held, f))
            return None
        try:
            nxt = step.then(results)
        except Exception as exc:  # a pipeline's own bug fails this item; the writer and the job go on
            log.exception("item %d: answers could not be taken", held.id)
            nxt = failure(held.id, held.plan.job.id, PARSE_ERROR, repr(exc)[:500])
        if isinstance(nxt, outcomes.Outcome):
            return self._final(held, nxt)
        self._next(held, nxt)
        return None

    def _final(self, held: Held, outcome: outcomes.Outcome) -> Written | None:
        if held.finished:  # a second refusal of the same round, say: the first outcome stands
            return None
        held.finished = True
        self._answered(held.id)
        if held.content_hash is not None and outcome.content_hash is None:
            outcome = dataclasses.replace(outcome, content_hash=held.content_hash)
        for follower in self._duplicates.settle(held.id, outcome):
            if outcome.error_code is None:
                job_id, content = follower.plan.job.id, follower.content_hash
                self._writer.put(
                    ("done", follower, copy_of(outcome, item_id=follower.id, job_id=job_id, content_hash=content))
                )
            else:  # the leader failed: the follower runs on its own
                with self._cond:
                    self._working += 1
                    self._weights[follower.id] = 1
                self._start(follower)
        return held, outcome

    def _written(self, pending: list[Written], moved: set[int]) -> None:
        self._settle([(h, h.id in moved) for h, _ in pending])
        if self._on_written is not None:
            self._on_written(len(moved))

    # --------------------------------------------------------------------------------- chunks

    def _released(self, chunk_id: int) -> bool:
        ticket = self._tickets.get(chunk_id)
        return ticket is None or ticket.released

    def _renewable(self) -> list[int]:
        with self._cond:
            return [cid for cid, t in self._tickets.items() if not t.released and t.outstanding]

    def _settle(self, done: list[tuple[Held, bool]]) -> None:
        """Items written (or found terminal already): free their room and finish chunks left empty."""
        finished: list[ChunkTicket] = []
        with self._cond:
            for held, moved in done:
                self._duplicates.forget(held.id)  # committed: a later duplicate finds it in the database
                ticket = self._tickets.get(held.chunk_id)
                if ticket is None or held.id not in ticket.outstanding:
                    continue
                ticket.outstanding.discard(held.id)
                ticket.finished += int(moved)
                self._held -= 1
                weight = self._weights.pop(held.id, None)
                if weight is not None:  # written without passing an answer point
                    self._working -= weight
                if not ticket.outstanding:
                    finished.append(ticket)
            self._cond.notify_all()
        for ticket in finished:
            self._finish(ticket)

    def _hand_back(self, charges: Counter[int]) -> None:
        """The breaker opened: every held item goes back queued, uncharged, and nothing of theirs runs on."""
        with self._cond:
            tickets = list(self._tickets.values())
            self._tickets.clear()
            self._held = self._working = 0
            self._weights.clear()
            self._cond.notify_all()
        for t in tickets:
            for h in t.items:
                h.finished = True  # answers still on their way are dropped, and so are their crashes
        self._crashes.forget()
        self.ctx.runner.close(abandon=True)
        self.ctx.runner.drop_queued()  # retries sent after the crash must not run on the next engine
        self.handed_back = True
        give_back(self.ctx, tickets, charges)

    def _finish(self, ticket: ChunkTicket) -> None:
        self._leases.finish(ticket.chunk_id)
        with self._cond:
            self._tickets.pop(ticket.chunk_id, None)
            self._cond.notify_all()
        if not ticket.done.done():
            ticket.done.set_result(ticket.finished)

    # ----------------------------------------------------------------------------- stopping

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until every held chunk is finished; False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._tickets:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(min(1.0, left) if left is not None else 1.0)
        return True

    def stop_claiming(self) -> None:
        with self._cond:
            self._stopping = True
            self._stop_requested.set()
            self._cond.notify_all()

    def stop(self, *, drain_timeout_s: float) -> list[int]:
        """Stop claiming, let held chunks finish for up to ``drain_timeout_s``, hand the rest back to the
        database (another worker takes them), and stop the threads. Returns the chunk ids handed back."""
        self.stop_claiming()
        self.wait_idle(drain_timeout_s)
        with self._cond:
            left = [t for t in self._tickets.values() if not t.released]
            for t in left:
                t.released = True
        ids = [t.chunk_id for t in left]
        if ids:
            self._leases.release(ids)
        for t in left:
            if not t.done.done():
                t.done.set_result(t.finished)
        self.close()
        return ids

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        self._crashes.close()
        self._breaker.close()
        self._writer.close()
        self._leases.join()
        if self._sampler is not None:
            self._sampler.join(30)
        if self.energy is not None:
            self.energy.stop()  # after the writer: the last answers' tokens are in the last interval

"""The continuous feeder: keeps one engine full from leased chunks, for the Celery worker and the embedded
runner alike.

A chunk is a unit of claiming and acknowledgement, not a barrier. ``add_chunk`` waits only until fewer
than ``hold`` items await their answers (and fewer than ``2 * hold`` their writes: a database stall of a
second must not starve the engine, nor an outage grow memory), then leases the chunk and hands every item
to the preprocessing pool; a prepared item goes straight to the engine runner, which keeps ``max_num_seqs``
requests running with a few more waiting inside the engine and the rest, prepared, in its backlog. Answers
are parsed and written by one writer thread in batches; a chunk is finished the moment its last item is written.
Leases are renewed while a chunk is held. ``stop`` stops claiming, lets held work finish for a bounded
time, then hands what is left back to the database for another worker.

Failures stay with their item (invariant 4): an input error, a parse error or an engine refusal is that
item's error code. An engine crash restarts the engine once (however many items saw it); the items that
were in it are retried solo, so a crash is pinned on the item that causes it, and an item that crashes
the engine ``MAX_CRASHES_PER_ITEM`` times alone fails as ``engine_crash`` (invariant 5). A crash that a stop
follows within ``SHUTDOWN_GRACE_S`` (one signal to the process group reaches the engine first) restarts nothing
and blames no one: its items go back with their chunks.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any, TypeVar

from pydantic import ValidationError
from sqlalchemy import update
from sqlalchemy.exc import SQLAlchemyError

from engine.runtime.requests import EngineCrashed, GenerationRequest, GenerationResult
from pipelines import registry
from pipelines.base import ImagePipeline, ParseError, Pipeline, PipelineKind, RequestPipeline
from preprocessing.errors import InputError
from vlbatch.db import crud
from vlbatch.db.models import Chunk, EngineSample, Item, Job
from vlbatch.errors import (
    ENGINE_CRASH,
    ENGINE_REJECTED,
    INVALID_OPTIONS,
    PARSE_ERROR,
    PREPROCESS_ERROR,
    UNKNOWN_PIPELINE,
)
from worker.context import WorkerContext
from worker.energy import EnergyBooker
from worker.image_items import build_requests
from worker.request_items import build_request_item

log = logging.getLogger(__name__)
_T = TypeVar("_T")

MAX_CRASHES_PER_ITEM = 2
# A stop signal sent to the worker's process group (systemd's default, a supervisor's killpg) reaches the
# engine's processes as soon as the worker: the engine then looks crashed a moment before the worker hears it
# is stopping. A crash waits this long for a stop before it restarts the engine and blames anyone.
SHUTDOWN_GRACE_S = 3.0
DOCUMENT_WEIGHT = 16  # a document asks many requests (OCR pages, chunks): it holds the room of several images


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


@dataclass
class _JobPlan:
    job: Job
    pipeline: Pipeline | None
    opts: Any
    marker: crud.Marker
    error: tuple[str, str] | None = None  # a configuration error: every item of the job fails with it


@dataclass
class _Held:
    """One item between its claim and its written outcome."""

    id: int
    chunk_id: int
    plan: _JobPlan
    attempt: int
    crash_count: int
    sources: list[str]
    body: dict[str, Any] | None = None  # a request item's body (OpenAI chat or completions)
    requests: list[GenerationRequest] = field(default_factory=list)
    results: dict[int, GenerationResult] = field(default_factory=dict)
    answered: set[int] = field(default_factory=set)  # requests whose answer is back (a crash is no answer)
    suspect: bool = False  # was in the engine when it crashed: retried solo
    retries: int = 0


@dataclass
class ChunkTicket:
    chunk_id: int
    outstanding: set[int]
    weight: int
    done: Future[int] = field(default_factory=Future)  # items of the chunk this worker finished
    finished: int = 0
    released: bool = False


class Feeder:
    def __init__(
        self,
        ctx: WorkerContext,
        *,
        hold: int | None = None,
        write_batch: int = 256,
        write_interval_s: float = 0.2,
        on_written: Callable[[int], None] | None = None,
        sample_interval_s: float | None = None,
        energy: EnergyBooker | None = None,
    ) -> None:
        cfg = ctx.runner.config
        self.ctx = ctx
        # Books the chips' energy to the jobs by their tokens; the feeder starts and stops it.
        self.energy = energy
        # Enough to keep admission_limit requests in the engine plus a prepared backlog of max_num_seqs.
        self.hold = hold or cfg.admission_limit + cfg.max_num_seqs
        self.stats = FeederStats()
        self._stats_lock = threading.Lock()
        self._write_batch = write_batch
        self._write_interval_s = write_interval_s
        self._on_written = on_written
        self._sample_interval_s = sample_interval_s
        self._lease = timedelta(seconds=ctx.settings.lease_seconds)
        self._cond = threading.Condition()
        self._held = 0  # items claimed and not yet written
        # Items claimed and not yet answered (preprocessing, in the engine, or waiting for a crash retry), with
        # their weight. Room is freed when the answer is back, not when it is written: a database that stalls
        # for a second must not starve the engine. Written-but-not-answered is bounded by ``2 * hold``.
        self._unanswered: dict[int, int] = {}
        self._working = 0
        self._tickets: dict[int, ChunkTicket] = {}
        self._plans: dict[str, _JobPlan] = {}
        self._events: queue.Queue[tuple[Any, ...] | None] = queue.Queue()
        self._crashes: queue.Queue[tuple[_Held, int, EngineCrashed] | None] = queue.Queue()
        self._stopping = False
        self._stop_requested = threading.Event()  # set with _stopping, for waits that a stop should cut short
        self._graced_generation = 0  # the last crashed engine generation that waited SHUTDOWN_GRACE_S
        self._closed = threading.Event()
        self._threads = [
            threading.Thread(target=self._write_loop, name="feeder-writer", daemon=True),
            threading.Thread(target=self._crash_loop, name="feeder-crashes", daemon=True),
            threading.Thread(target=self._lease_loop, name="feeder-leases", daemon=True),
        ]
        if sample_interval_s:
            self._threads.append(threading.Thread(target=self._sample_loop, name="feeder-samples", daemon=True))
        for t in self._threads:
            t.start()
        if energy is not None:
            energy.start()

    # ------------------------------------------------------------------------------------ claiming

    @property
    def held_items(self) -> int:
        return self._held

    @property
    def stopping(self) -> bool:
        return self._stopping

    def wait_for_room(self, timeout: float | None = None) -> bool:
        """Block while ``hold`` items or more await their answers (or ``2 * hold`` their writes); False on
        timeout or when stopping."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not self._stopping and (self._working >= self.hold or self._held >= 2 * self.hold):
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(min(1.0, left) if left is not None else 1.0)
            return not self._stopping

    def add_chunk(self, chunk_id: int) -> ChunkTicket | None:
        """Wait for room, lease ``chunk_id`` and start its items. None when stopping or when another worker
        holds the chunk; a chunk this feeder already holds returns its ticket."""
        if not self.wait_for_room():
            return None
        with self._cond:
            if chunk_id in self._tickets:
                return self._tickets[chunk_id]
            ticket = ChunkTicket(chunk_id, set(), 0)
            self._tickets[chunk_id] = ticket  # reserved: a second task for the same chunk gets this ticket
        try:
            items, plan = self._claim(chunk_id)
        except Exception:
            with self._cond:
                self._tickets.pop(chunk_id, None)
            raise
        if not items or plan is None:
            with self._cond:
                self._tickets.pop(chunk_id, None)
            if plan is not None:  # leased, but nothing left: a worker died after its last write
                self._finish(ticket)  # sets the ticket's result
            if not ticket.done.done():
                ticket.done.set_result(0)
            return None if plan is None else ticket
        weight = DOCUMENT_WEIGHT if plan.pipeline is not None and plan.pipeline.kind == PipelineKind.DOCUMENT else 1
        with self._cond:
            ticket.outstanding = {it.id for it in items}
            ticket.weight = weight
            self._held += weight * len(items)
            self._working += weight * len(items)
            self._unanswered.update((it.id, weight) for it in items)
        if plan.error is not None:
            for it in items:
                self._fail(self._holder(it, plan), *plan.error)
        elif isinstance(plan.pipeline, ImagePipeline | RequestPipeline):  # one request path for both
            for it in items:
                self._start_image_item(self._holder(it, plan))
        else:
            threading.Thread(
                target=self._run_documents, args=(ticket, plan, items), name=f"documents-{chunk_id}", daemon=True
            ).start()
        return ticket

    def _claim(self, chunk_id: int) -> tuple[list[Item], _JobPlan | None]:
        started = time.perf_counter()
        with self.ctx.sessions() as s:
            items = crud.claim_chunk(s, chunk_id=chunk_id, owner=self.ctx.owner, lease=self._lease)
            chunk = s.get(Chunk, chunk_id)
            job = s.get(Job, chunk.job_id) if chunk is not None and chunk.lease_owner == self.ctx.owner else None
            s.commit()
        with self._stats_lock:
            self.stats.db_seconds += time.perf_counter() - started
        return items, (self._plan(job) if job is not None else None)

    def _plan(self, job: Job) -> _JobPlan:
        plan = self._plans.get(job.id)
        if plan is not None:
            return plan
        pipeline: Pipeline | None = None
        opts: Any = None
        error: tuple[str, str] | None = None
        version = "?"
        try:
            pipeline = registry.get(job.pipeline)
            version = pipeline.version
            opts = pipeline.options(job.options)
        except registry.UnknownPipeline as exc:
            error = (UNKNOWN_PIPELINE, str(exc))
        except ValidationError as exc:
            error = (INVALID_OPTIONS, f"job options rejected by {job.pipeline}: {exc}".splitlines()[0])
        marker = crud.Marker(self.ctx.model_name, self.ctx.model_revision, version, job.options_hash)
        plan = _JobPlan(job, pipeline, opts, marker, error)
        if len(self._plans) > 256:  # bounded: a long-lived worker sees many jobs
            self._plans.clear()
        self._plans[job.id] = plan
        return plan

    @staticmethod
    def _holder(item: Item, plan: _JobPlan) -> _Held:
        images = list(item.inputs.get("images", []))
        return _Held(item.id, item.chunk_id, plan, item.attempts, item.crash_count, images, item.inputs.get("body"))

    # ------------------------------------------------------------------------------ image items

    def _start_image_item(self, held: _Held) -> None:
        self.ctx.pool.submit(self._prepare, held).add_done_callback(lambda fut: self._prepared(held, fut))

    def _prepare(self, held: _Held) -> list[GenerationRequest]:
        # CPU seconds of this pool thread: waiting for a core or the GIL is not preprocessing cost, and the
        # figure then compares with vlbatch bench's raw arm, which counts the same way.
        started = time.thread_time()
        try:
            if isinstance(held.plan.pipeline, RequestPipeline):
                return build_request_item(
                    self.ctx,
                    held.plan.pipeline,
                    held.plan.opts,
                    item_id=held.id,
                    attempt=held.attempt,
                    body=held.body or {},
                )
            assert isinstance(held.plan.pipeline, ImagePipeline)
            return build_requests(
                self.ctx,
                held.plan.pipeline,
                held.plan.opts,
                item_id=held.id,
                attempt=held.attempt,
                sources=held.sources,
            )
        finally:
            with self._stats_lock:  # several preprocessing threads add here
                self.stats.prep_seconds += time.thread_time() - started
                self.stats.prep_images += len(held.sources)

    def _prepared(self, held: _Held, fut: Future[list[GenerationRequest]]) -> None:
        exc = fut.exception()
        if isinstance(exc, InputError):
            self._fail(held, exc.code, exc.message)
            return
        if exc is not None:  # an unexpected decoder failure is still one item's failure
            self._fail(held, PREPROCESS_ERROR, repr(exc))
            return
        held.requests = fut.result()
        if not held.requests:  # nothing would ever answer it: the item would hold its chunk for ever
            self._fail(held, PREPROCESS_ERROR, "the item made no engine request")
            return
        for k, req in enumerate(held.requests):
            self._submit(held, k, req)

    def _submit(self, held: _Held, k: int, req: GenerationRequest) -> None:
        (fut,) = self.ctx.runner.submit([req])
        fut.add_done_callback(lambda f: self._answer(held, k, f))

    def _answer(self, held: _Held, k: int, fut: Future[GenerationResult]) -> None:
        """A request's future is done (on the engine's thread): the item's room is free once every request has
        an answer; a crash is none (the crash thread retries or fails the item)."""
        if fut.cancelled() or not isinstance(fut.exception(), EngineCrashed):
            with self._cond:
                held.answered.add(k)
                complete = len(held.answered) >= len(held.requests)
            if complete:
                self._answered(held.id)
        self._events.put(("answer", held, k, fut))

    def _fail(self, held: _Held, code: str, message: str) -> None:
        self._answered(held.id)
        self._events.put(("fail", held, code, message))

    def _answered(self, item_id: int) -> None:
        with self._cond:
            weight = self._unanswered.pop(item_id, None)
            if weight is not None:
                self._working -= weight
                self._cond.notify_all()

    # ------------------------------------------------------------------------------- the writer

    def _write_loop(self) -> None:
        pending: list[tuple[_Held, crud.Outcome]] = []
        first_at = 0.0
        while True:
            timeout = self._write_interval_s - (time.monotonic() - first_at) if pending else None
            try:
                event = self._events.get(timeout=max(0.0, timeout) if timeout is not None else None)
            except queue.Empty:
                event = ()
            if event is None:
                self._flush(pending)
                return
            outcome = self._outcome(event) if event else None
            if outcome is not None:
                if not pending:
                    first_at = time.monotonic()
                pending.append(outcome)
            if pending and (len(pending) >= self._write_batch or time.monotonic() - first_at >= self._write_interval_s):
                self._flush(pending)
                pending = []

    def _outcome(self, event: tuple[Any, ...]) -> tuple[_Held, crud.Outcome] | None:
        kind, held = event[0], event[1]
        if kind == "fail":
            return held, crud.Outcome(held.id, held.plan.job.id, None, None, 0, 0, event[2], event[3])
        if kind == "documents":
            self._documents_done(event[1], event[2])
            return None
        k, fut = event[2], event[3]
        exc = fut.exception()
        if exc is not None and self._stopping:  # the engine went with the shutdown: not the item's fault
            return None  # left unanswered; stop() hands its chunk back
        if isinstance(exc, EngineCrashed):
            self._crashes.put((held, k, exc))
            return None
        if exc is not None:  # refused by the engine (e.g. prompt over max_model_len)
            return held, crud.Outcome(held.id, held.plan.job.id, None, None, 0, 0, ENGINE_REJECTED, str(exc))
        held.results[k] = fut.result()
        if len(held.results) < len(held.requests):
            return None
        return held, self._parse(held)

    def _parse(self, held: _Held) -> crud.Outcome:
        pipeline, opts = held.plan.pipeline, held.plan.opts
        assert isinstance(pipeline, ImagePipeline | RequestPipeline)
        results = [held.results[k] for k in range(len(held.requests))]
        raw: str | None = results[0].text if len(results) == 1 else "\n".join(r.text for r in results)
        if isinstance(pipeline, RequestPipeline):
            # The output holds the answer as it came, JSON-escaped; a raw copy would only double it, and free text
            # may hold NUL characters, which a PostgreSQL text column refuses.
            raw = None
        prompt = sum(r.prompt_tokens for r in results)
        completion = sum(r.completion_tokens for r in results)
        job_id = held.plan.job.id
        segments = [req.segment for req in held.requests]
        try:
            outputs = [pipeline.parse(r.text, opts, finish_reason=r.finish_reason) for r in results]
            if isinstance(pipeline, RequestPipeline):
                output = outputs[0]
            elif any(seg is not None for seg in segments):  # a video item: one request per segment of the clip
                output = pipeline.merge_video(outputs, segments, opts)
            else:
                output = pipeline.merge(outputs, opts)
        except ParseError as exc:
            return crud.Outcome(held.id, job_id, None, raw, prompt, completion, exc.code, str(exc))
        except Exception as exc:  # a pipeline's own bug fails this item; the writer and the job go on
            log.exception("item %d: answers could not be combined", held.id)
            return crud.Outcome(held.id, job_id, None, raw, prompt, completion, PARSE_ERROR, repr(exc)[:500])
        return crud.Outcome(held.id, job_id, output, raw, prompt, completion)

    def _flush(self, pending: list[tuple[_Held, crud.Outcome]]) -> None:
        if not pending:
            return
        live = [(h, o) for h, o in pending if not self._released(h.chunk_id)]
        started = time.perf_counter()
        if live:
            markers = {h.plan.job.id: h.plan.marker for h, _ in live}

            def write() -> set[int]:
                with self.ctx.sessions() as s:
                    ids = set(crud.record_outcomes(s, outcomes=[o for _, o in live], markers=markers))
                    s.commit()
                return ids

            moved = self._until_written(write, what=f"{len(live)} answers") or set()
        else:
            moved = set()
        with self._stats_lock:
            self.stats.db_seconds += time.perf_counter() - started
            self.stats.db_items += len(live)
        for _, o in live:
            if o.item_id in moved:
                self.stats.items_done += 1
                self.stats.prompt_tokens += o.prompt_tokens
                self.stats.output_tokens += o.completion_tokens
                if self.energy is not None:
                    self.energy.ledger.add_tokens(o.job_id, o.prompt_tokens + o.completion_tokens)
        self._settle([(h.chunk_id, h.id, h.id in moved) for h, _ in pending])
        if self._on_written is not None:
            self._on_written(len(moved))

    def _until_written(self, write: Callable[[], _T], *, what: str) -> _T | None:
        """Run a database write, retrying with back-off while the database is unreachable (a restart or a
        failover): the answers stay held meanwhile, and their leases are renewed once it is back. Gives up
        (None) only when the feeder is closing; the leases then lapse and another worker redoes the items."""
        wait = 0.5
        while True:
            try:
                return write()
            except SQLAlchemyError as exc:
                if self._closed.is_set():
                    log.error("database unreachable while closing; %s not written: %s", what, exc)
                    return None
                log.warning("database write of %s failed, retrying in %.1f s: %s", what, wait, exc)
                time.sleep(wait)
                wait = min(wait * 2, 10.0)

    def _released(self, chunk_id: int) -> bool:
        ticket = self._tickets.get(chunk_id)
        return ticket is None or ticket.released

    def _settle(self, done: list[tuple[int, int, bool]]) -> None:
        """Items written (or found terminal already): free their room and finish chunks left empty."""
        finished: list[ChunkTicket] = []
        with self._cond:
            for chunk_id, item_id, moved in done:
                ticket = self._tickets.get(chunk_id)
                if ticket is None or item_id not in ticket.outstanding:
                    continue
                ticket.outstanding.discard(item_id)
                ticket.finished += int(moved)
                self._held -= ticket.weight
                if self._unanswered.pop(item_id, None) is not None:  # written without passing an answer point
                    self._working -= ticket.weight
                if not ticket.outstanding:
                    finished.append(ticket)
            self._cond.notify_all()
        for ticket in finished:
            self._finish(ticket)

    def _finish(self, ticket: ChunkTicket) -> None:
        started = time.perf_counter()

        def write() -> None:
            with self.ctx.sessions() as s:
                crud.finish_chunk(s, chunk_id=ticket.chunk_id, owner=self.ctx.owner)
                s.commit()

        self._until_written(write, what=f"chunk {ticket.chunk_id}'s end")
        with self._stats_lock:
            self.stats.db_seconds += time.perf_counter() - started
        with self._cond:
            self._tickets.pop(ticket.chunk_id, None)
            self._cond.notify_all()
        if not ticket.done.done():
            ticket.done.set_result(ticket.finished)

    # ------------------------------------------------------------------------------- crashes

    def _crash_loop(self) -> None:
        while (entry := self._crashes.get()) is not None:
            held, k, crash = entry
            try:
                self._handle_crash(held, k, crash)
            except Exception:  # a failure here must not stop crash handling for the other items
                if self._stopping:  # e.g. the restart failed because the worker is going down: not the item's fault
                    log.warning("item %d: engine not restarted while stopping; left for another worker", held.id)
                    continue
                log.exception("crash handling failed for item %d", held.id)
                self._fail(held, ENGINE_CRASH, "crash handling failed; see the worker log")

    def _handle_crash(self, held: _Held, k: int, crash: EngineCrashed) -> None:
        if self._released(held.chunk_id):
            return
        if crash.generation != self._graced_generation:  # once per crashed engine, not once per item
            self._graced_generation = crash.generation
            self._stop_requested.wait(SHUTDOWN_GRACE_S)
        if self._stopping:
            # Shutting down: the stop signal often reaches the engine's processes too. Loading a new engine now
            # would hold the exit for a minute; the item stays unanswered and stop() hands its chunk back.
            log.warning("item %d: engine gone while stopping; left for another worker", held.id)
            return
        # The first report of a crash restarts the engine; the others of the same generation do not.
        self.ctx.runner.restart(crashed_generation=crash.generation)
        if crash.in_flight == 1:  # it ran alone: the crash is its own
            held.crash_count += 1
            with self.ctx.sessions() as s:
                s.execute(update(Item).where(Item.id == held.id).values(crash_count=held.crash_count))
                s.commit()
            if held.crash_count >= MAX_CRASHES_PER_ITEM:
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
        self._submit(held, k, replace(req, request_id=f"{req.request_id}-r{held.retries}", solo=held.suspect))

    # ---------------------------------------------------------------------------- documents

    def _run_documents(self, ticket: ChunkTicket, plan: _JobPlan, items: list[Item]) -> None:
        from worker.documents import process_document_items  # imports the document libraries on first use

        try:
            book = self.energy.ledger.add_tokens if self.energy is not None else None
            process_document_items(self.ctx, plan.job, items, on_tokens=book)
        except Exception:
            log.exception("document chunk %d failed", ticket.chunk_id)
        for it in items:
            self._answered(it.id)
        self._events.put(("documents", ticket, [it.id for it in items]))

    def _documents_done(self, ticket: ChunkTicket, item_ids: list[int]) -> None:
        # The document stages wrote their own outcomes; one left running (engine crash) goes back to the
        # database with the chunk, and the reconciler sends it again.
        self._settle([(ticket.chunk_id, i, True) for i in item_ids])

    # ------------------------------------------------------------------------------- leases

    def _lease_loop(self) -> None:
        every = max(1.0, self._lease.total_seconds() / 4)
        while not self._closed.wait(every):
            with self._cond:
                ids = [cid for cid, t in self._tickets.items() if not t.released and t.outstanding]
            if not ids:
                continue
            try:
                with self.ctx.sessions() as s:
                    kept = crud.renew_leases(s, chunk_ids=ids, owner=self.ctx.owner, lease=self._lease)
                    s.commit()
            except Exception:
                log.exception("lease renewal failed for %d chunks", len(ids))
                continue
            for cid in set(ids) - kept:
                log.warning("chunk %d: lease lost to another worker; its results are written only if still due", cid)

    # ------------------------------------------------------------------------------- samples

    def _sample_loop(self) -> None:
        assert self._sample_interval_s
        last = self.ctx.runner.occupancy()
        while not self._closed.wait(self._sample_interval_s):
            snap = self.ctx.runner.occupancy()
            st = self.stats
            row = EngineSample(
                worker=self.ctx.owner,
                sampled_at=crud.utcnow(),
                steps=snap.steps,
                running_sum=snap.running_sum,
                capacity=snap.capacity,
                mean_running=snap.mean_running_since(last),
                backlog=self.ctx.runner.backlog,
                items_done=st.items_done,
                output_tokens=st.output_tokens,
                prep_images=st.prep_images,
                prep_seconds=st.prep_seconds,
                db_items=st.db_items,
                db_seconds=st.db_seconds,
            )
            last = snap
            try:
                with self.ctx.sessions() as s:
                    s.add(row)
                    s.commit()
            except Exception:
                log.exception("engine sample not stored")

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
            with self.ctx.sessions() as s:
                crud.release_chunks(s, chunk_ids=ids, owner=self.ctx.owner)
                s.commit()
            log.warning("handed %d unfinished chunks back for another worker: %s", len(ids), ids)
        for t in left:
            if not t.done.done():
                t.done.set_result(t.finished)
        self.close()
        return ids

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        self._crashes.put(None)
        self._events.put(None)
        for t in self._threads:
            t.join(30)
        if self.energy is not None:
            self.energy.stop()  # after the writer: the last answers' tokens are in the last interval

"""One vLLM engine per process (or the stub engine, ``engine.runtime.stub``), fed continuously from a queue by a
single engine thread.

``load()`` builds the engine once; ``submit()`` may be called from any thread and returns futures. The
engine thread keeps ``config.admission_limit`` requests inside the engine (``max_num_seqs`` running and a
few waiting, so a finished sequence is replaced within the engine's own step) and holds the rest, already
prepared, in its backlog; it never waits for a batch to finish before admitting more.

vLLM runs its engine core in a child process. When that process dies (killed, out of memory, a device
fault), ``step()`` may block for ever instead of raising, so a watchdog thread polls the core processes this
runner started: a dead one fails every request of that engine with ``EngineCrashed``, exactly as a raising
step would, and the caller restarts the engine. So does a hung engine: with ``stall_s`` set, requests in flight and
no step finished for that long fail the same way (the caller's crash policy counts it like any crash).
"""

from __future__ import annotations

import logging
import multiprocessing
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from engine.platforms.mm_merge import MERGE_CONTROL, REMEDY, MergeState
from engine.runtime import load_ledger
from engine.runtime.config import EngineConfig
from engine.runtime.occupancy import Occupancy, OccupancySnapshot, attach
from engine.runtime.requests import EngineCrashed, EngineStopped, GenerationRequest, GenerationResult
from engine.structured import for_vllm

log = logging.getLogger(__name__)


def _as_is(req: GenerationRequest) -> GenerationRequest:
    return req


class EngineRunner:
    def __init__(
        self,
        config: EngineConfig,
        *,
        engine_factory: Callable[[], Any] | None = None,
        load_ledger: Path | None = None,
    ) -> None:
        """``engine_factory`` builds what the loop feeds (default: the engine ``config.backend`` names, vLLM's or
        the stub); such an engine, and the stub, get each ``GenerationRequest`` itself as its parameters instead of
        vLLM SamplingParams. ``load_ledger`` is the file each load is counted in (``engine.runtime.load_ledger``)."""
        self.config = config
        self.ledger = load_ledger
        vllm = engine_factory is None and config.backend == "vllm"
        self._engine_factory = engine_factory or (self._load_vllm if vllm else self._load_stub)
        self._params: Callable[[GenerationRequest], Any] = self._sampling if vllm else _as_is
        self._llm: Any = None
        self._stub: Any = None  # the stub engine of the current generation (backend "stub")
        self._inbox: queue.Queue[tuple[GenerationRequest, Future[GenerationResult]] | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._in_flight = 0
        self._waiting = 0
        self._occupancy = Occupancy(config.max_num_seqs)
        self._last_progress = time.monotonic()
        self._abandon = threading.Event()
        self.generation = 0  # bumped by every load; a crash names the generation that died
        self._core_procs: list[Any] = []  # the engine core processes of the current generation
        self._dead: set[int] = set()  # generations whose core process died: their loops must stop
        self._live: tuple[dict[str, Future[GenerationResult]], deque[Any]] | None = None  # the loop's own
        self.watchdog_interval_s = 1.0
        self._probation = False  # restarted after a crash and no answer since: every request runs alone
        self.stall_s: float | None = None  # requests in flight and no step for this long: the engine hangs
        self.mm_merge_state: MergeState | None = None  # what the multimodal-merge plugin did in the engine, at load

    def load(self) -> None:
        self.start_loop(self._engine_factory())

    def _load_vllm(self) -> Any:
        from vllm import LLM  # lazy: importing engine/ never touches a device

        log.info("loading engine for %s", self.config.model)
        load_ledger.record(self.ledger, model=self.config.model)
        before = {p.pid for p in multiprocessing.active_children()}
        # Statistics on: the scheduler then reports its running requests with every step (occupancy).
        # The worker extension lets the runner ask the engine's worker what vlbatch's vLLM plugin did there.
        kwargs = {"disable_log_stats": False, "worker_extension_cls": MERGE_CONTROL, **self.config.llm_kwargs()}
        self._llm = LLM(**kwargs)
        self._core_procs = [p for p in multiprocessing.active_children() if p.pid not in before]
        self._log_mm_merge()
        engine = self._llm.llm_engine
        if not attach(engine, self._occupancy):
            log.warning("engine reports no scheduler statistics; occupancy is counted from requests in the engine")
        return engine

    def _log_mm_merge(self) -> None:
        """Say once, at start, what the multimodal-merge plugin did inside the engine (the line the 310P operator
        looks for): an error when the fix was wanted and refused, else one info line."""
        try:
            merge = self.mm_merge()
        except Exception as e:  # an engine without our extension (extra overrides it): nothing to ask
            log.debug("multimodal merge state not readable from the engine: %s", e)
            return
        self.mm_merge_state = merge
        if not merge.registered:
            log.warning(
                "vlbatch's vLLM plugin did not load in the engine (pid %d): reinstall vlbatch so its"
                " vllm.general_plugins entry point is registered (pip install .)",
                merge.pid,
            )
        elif merge.refused:
            log.error("%s in engine pid %d; %s", merge.summary(), merge.pid, REMEDY)
        else:
            log.info("%s in engine pid %d", merge.summary(), merge.pid)

    def mm_merge(self, mode: str | None = None) -> MergeState:
        """The multimodal-merge plugin's state in the engine's worker process, after switching it to ``mode``
        (auto, index, off) when one is given. Call it with no request in flight: it talks to the engine core on
        the loop's channel. A switch also drops the prefix cache, so the next prompts run the merge now chosen
        rather than reusing what the other one computed."""
        from engine.platforms.mm_merge import from_report

        if self._llm is None:
            raise EngineStopped("no vLLM engine is loaded")
        state = from_report(self._llm.collective_rpc("vlbatch_mm_merge", args=(mode,)))
        if mode is not None:
            self._llm.reset_prefix_cache()
        return state

    def _load_stub(self) -> Any:
        from engine.runtime.stub import StubEngine

        # Logged and counted as a vLLM load is, so restarts read the same; the ledger keeps it apart (backend).
        log.info("loading engine for %s", self.config.model)
        load_ledger.record(self.ledger, model=self.config.model, backend="stub")
        self._stub = StubEngine(self.config.stub)
        return self._stub

    def restart(self, *, crashed_generation: int | None = None) -> None:
        """Replace the engine. Given the generation a caller saw crash, only the first caller restarts:
        chunks running side by side all see the same crash and must not kill the fresh engine again."""
        with self._lock:
            if crashed_generation is not None and crashed_generation != self.generation:
                return
            self.close()
            self._probation = crashed_generation is not None  # before the new loop admits anything
            self.load()

    def close(self, *, abandon: bool = False) -> None:
        """Stop the loop and shut the engine down. The loop first finishes what it holds, unless
        ``abandon``: then every queued or running request fails at once with ``EngineStopped``."""
        if self._thread is not None:
            # A loop that died on a crash must not leave a stop mark behind, and one whose core process died
            # may sit in step() for ever (its requests have failed already): neither gets one.
            if self._thread.is_alive() and self.generation not in self._dead:
                if abandon:
                    self._abandon.set()
                self._inbox.put(None)
                self._thread.join(30)
            self._thread = None
            self._abandon.clear()
        if self._llm is not None:
            engine = getattr(self._llm, "llm_engine", None)
            shutdown = getattr(getattr(engine, "engine_core", None), "shutdown", None)
            if callable(shutdown):
                shutdown()
            self._llm = None
        if self._stub is not None:
            self._stub.shutdown()
            self._stub = None

    def drop_queued(self) -> None:
        """Fail every request still in the inbox with ``EngineStopped`` (the loop is closed): a worker handing its
        work back must not have it run on the next engine."""
        while True:
            try:
                entry = self._inbox.get_nowait()
            except queue.Empty:
                return
            if entry is not None and not entry[1].done():
                entry[1].set_exception(EngineStopped("the worker handed the request's item back"))

    def healthy(self, *, max_stall_s: float) -> bool:
        """The engine thread is alive and, if it has work, finished a step within ``max_stall_s``."""
        if self._thread is None or not self._thread.is_alive() or self.generation in self._dead:
            return False
        return self._in_flight == 0 or time.monotonic() - self._last_progress < max_stall_s

    def occupancy(self) -> OccupancySnapshot:
        return self._occupancy.snapshot()

    @property
    def backlog(self) -> int:
        """Requests submitted and not yet inside the engine (queued here, prepared)."""
        return self._waiting + self._inbox.qsize()

    @property
    def in_engine(self) -> int:
        return self._in_flight

    def submit(self, requests: list[GenerationRequest]) -> list[Future[GenerationResult]]:
        futures: list[Future[GenerationResult]] = []
        for req in requests:
            fut: Future[GenerationResult] = Future()
            self._inbox.put((req, fut))
            futures.append(fut)
        return futures

    def _sampling(self, req: GenerationRequest) -> Any:
        from vllm import SamplingParams
        from vllm.sampling_params import StructuredOutputsParams

        so = StructuredOutputsParams(json=for_vllm(req.json_schema)) if req.json_schema else None
        return SamplingParams(
            max_tokens=req.max_tokens,
            temperature=req.temperature,
            structured_outputs=so,
            seed=self.config.seed if req.seed is None else req.seed,
            top_p=req.top_p,
            stop=list(req.stop) or None,
            presence_penalty=req.presence_penalty,
            frequency_penalty=req.frequency_penalty,
        )

    def start_loop(self, engine: Any) -> None:
        """Feed ``engine`` (vLLM's ``LLMEngine``, or anything with ``add_request``/``step``) from the inbox."""
        self._drop_stop_marks()
        self.generation += 1
        self._thread = threading.Thread(
            target=self._loop, args=(engine, self.generation), name=f"engine-loop-{self.generation}", daemon=True
        )
        self._thread.start()
        threading.Thread(
            target=self._watch_progress, args=(self.generation,), daemon=True, name=f"engine-stall-{self.generation}"
        ).start()
        if self._core_procs:
            threading.Thread(
                target=self._watch_core,
                args=(self.generation, list(self._core_procs)),
                daemon=True,
                name=f"engine-watchdog-{self.generation}",
            ).start()

    def _drop_stop_marks(self) -> None:
        """A stop mark left for a loop that never read it (stuck in a dead engine's step) must not stop the
        next loop; requests queued meanwhile stay, in order."""
        kept = []
        while True:
            try:
                entry = self._inbox.get_nowait()
            except queue.Empty:
                break
            if entry is not None:
                kept.append(entry)
        for entry in kept:
            self._inbox.put(entry)

    def _watch_core(self, generation: int, procs: list[Any]) -> None:
        """Fail the generation's requests when one of its engine core processes has died."""
        while self.generation == generation and self._thread is not None and self._thread.is_alive():
            dead = [p for p in procs if p.exitcode is not None]
            if dead:
                if self.generation != generation or self._abandon.is_set():
                    return  # a close or restart is shutting it down on purpose
                codes = ", ".join(f"pid {p.pid} exit {p.exitcode}" for p in dead)
                self._core_died(generation, f"engine core process died ({codes})")
                return
            time.sleep(self.watchdog_interval_s)

    def _watch_progress(self, generation: int) -> None:
        """Fail the generation's requests when its steps stop returning (a hang, no crash)."""
        while self.generation == generation and self._thread is not None and self._thread.is_alive():
            stall = self.stall_s
            time.sleep(self.watchdog_interval_s if stall is None else min(self.watchdog_interval_s, stall / 4))
            if stall is None or generation in self._dead or self.generation != generation or self._abandon.is_set():
                continue
            if self._in_flight and time.monotonic() - self._last_progress > stall:
                self._core_died(generation, f"engine hung: no step finished for {stall:.0f} s")
                return

    def _engine_gone(self, exc: Exception) -> bool:
        """``exc`` came from an engine that has died (vLLM's ``EngineDeadError``, or a core process has exited),
        not from the request it refused."""
        if any(cls.__name__ == "EngineDeadError" for cls in type(exc).__mro__):
            return True
        return any(p.exitcode is not None for p in self._core_procs)

    def _core_died(self, generation: int, reason: str) -> None:
        self._dead.add(generation)
        live = self._live
        if live is None:
            return
        pending, backlog = live
        in_flight = len(pending)
        log.error("%s with %d requests in flight", reason, in_flight)
        # The loop thread is blocked in step(); it mutates neither collection until that returns, if ever.
        for fut in list(pending.values()):
            if not fut.done():
                fut.set_exception(EngineCrashed(reason, generation=generation, in_flight=in_flight))
        for _, fut in list(backlog):  # never reached the engine: innocent, retried by their owners
            if not fut.done():
                fut.set_exception(EngineCrashed(reason, generation=generation, in_flight=0))

    def _fail_late(
        self,
        generation: int,
        pending: dict[str, Future[GenerationResult]],
        backlog: deque[tuple[GenerationRequest, Future[GenerationResult]]],
    ) -> None:
        """Fail what the loop took after the watchdog's sweep: a request read from the inbox while the generation
        was being declared dead must get an answer too, never wait for one."""
        late = EngineCrashed("the engine was declared dead", generation=generation, in_flight=0)
        for fut in [*pending.values(), *(fut for _, fut in backlog)]:
            if not fut.done():
                fut.set_exception(late)
        pending.clear()
        backlog.clear()
        self._in_flight = 0

    def _loop(self, engine: Any, generation: int) -> None:
        limit = self.config.admission_limit
        counted_by_runner = self._occupancy.source == "runner"
        capacity = self.config.max_num_seqs
        pending: dict[str, Future[GenerationResult]] = {}
        # Read from the inbox but not yet admitted: a solo request waits for the engine to drain, and
        # nothing is admitted beside it, so a crash while it runs can be pinned on it.
        backlog: deque[tuple[GenerationRequest, Future[GenerationResult]]] = deque()
        self._live = (pending, backlog)
        solo: str | None = None
        stopping = False
        while not stopping or pending or backlog:
            # What is in the engine now, before the loop may block on an empty inbox: a count left from the last
            # step would have the stall watchdog call an idle engine hung.
            self._in_flight = len(pending)
            self._waiting = len(backlog)
            if generation in self._dead:
                self._fail_late(generation, pending, backlog)
                return  # the watchdog failed everything when the core process died
            if self._abandon.is_set():
                self._stop_all(engine, pending, backlog)
                return
            idle = not pending and not backlog and not stopping
            try:
                while True:  # take everything queued: the scheduler batches what it is given
                    entry = self._inbox.get(block=idle, timeout=None) if idle else self._inbox.get_nowait()
                    idle = False
                    if entry is None:
                        stopping = True
                    else:
                        backlog.append(entry)
            except queue.Empty:
                pass
            # On probation (restarted after a crash, no answer since) every request runs alone: requests that were
            # waiting when the engine died must not crash it together again, where no one can be blamed.
            while (
                backlog
                and solo is None
                and len(pending) < limit
                and not ((backlog[0][0].solo or self._probation) and pending)
            ):
                req, fut = backlog.popleft()
                prompt: dict[str, Any] = {"prompt": req.prompt}
                if req.images or req.videos:
                    media: dict[str, Any] = {"image": req.images} if req.images else {}
                    if req.videos:
                        media["video"] = req.videos
                    prompt["multi_modal_data"] = media
                if not pending:  # the engine was idle: its stall clock starts now, not when it went idle
                    self._last_progress = time.monotonic()
                try:
                    engine.add_request(req.request_id, prompt, self._params(req))
                except Exception as exc:
                    if self._engine_gone(exc):  # a dead engine refuses every request: a crash, not this one's fault
                        backlog.appendleft((req, fut))
                        self._fail_all(exc, generation, pending, backlog)
                        return
                    fut.set_exception(exc)  # a bad request (e.g. too long) fails alone
                    continue
                pending[req.request_id] = fut
                if req.solo or self._probation:
                    solo = req.request_id
            self._in_flight = len(pending)
            self._waiting = len(backlog)
            if not pending:
                self._last_progress = time.monotonic()
                continue
            try:
                outputs = engine.step()
            except Exception as exc:
                self._fail_all(exc, generation, pending, backlog)
                return
            if generation in self._dead:
                self._fail_late(generation, pending, backlog)
                return  # the watchdog failed these requests while step() was blocked
            self._last_progress = time.monotonic()
            if counted_by_runner:
                self._occupancy.add(min(len(pending), capacity), max(0, len(pending) - capacity))
            for out in outputs:
                if not out.finished or out.request_id not in pending:
                    continue
                if out.request_id == solo:
                    solo = None
                comp = out.outputs[0]
                if comp.finish_reason == "abort":
                    # Only the engine aborts (the runner's own aborts end in _stop_all): its core was told to
                    # shut down, by a signal to the process group, say. The answer is cut short, and not
                    # by anything in the request: a crash's bystander, never a result.
                    pending.pop(out.request_id).set_exception(
                        EngineCrashed("the engine aborted the request", generation=generation, in_flight=0)
                    )
                    continue
                self._probation = False
                pending.pop(out.request_id).set_result(
                    GenerationResult(
                        request_id=out.request_id,
                        text=comp.text,
                        prompt_tokens=len(out.prompt_token_ids or []),
                        completion_tokens=len(comp.token_ids),
                        finish_reason=comp.finish_reason,
                    )
                )

    def _stop_all(
        self,
        engine: Any,
        pending: dict[str, Future[GenerationResult]],
        backlog: deque[tuple[GenerationRequest, Future[GenerationResult]]],
    ) -> None:
        abort = getattr(engine, "abort_request", None)
        if pending and callable(abort):
            abort(list(pending))
        while True:  # what is still in the inbox fails too, so no caller waits on it
            try:
                entry = self._inbox.get_nowait()
            except queue.Empty:
                break
            if entry is not None:
                backlog.append(entry)
        stopped = EngineStopped(f"runner closed with {len(pending)} running and {len(backlog)} queued requests")
        for fut in pending.values():
            fut.set_exception(stopped)
        for _, fut in backlog:
            fut.set_exception(stopped)
        pending.clear()
        backlog.clear()
        self._in_flight = 0

    def _fail_all(
        self,
        exc: Exception,
        generation: int,
        pending: dict[str, Future[GenerationResult]],
        backlog: deque[tuple[GenerationRequest, Future[GenerationResult]]],
    ) -> None:
        log.error("engine step failed with %d requests in flight: %s", len(pending), exc)
        for fut in pending.values():
            fut.set_exception(EngineCrashed(str(exc), generation=generation, in_flight=len(pending)))
        for _, fut in backlog:  # never reached the engine: innocent, retried by their owners
            fut.set_exception(EngineCrashed(str(exc), generation=generation, in_flight=0))
        pending.clear()
        backlog.clear()
        self._in_flight = 0

"""One vLLM engine per process, fed continuously from a queue by a single engine thread.

``load()`` builds the engine once; ``submit()`` may be called from any thread and returns futures, so
chunk N+1 can be added while chunk N decodes and the engine never drains between chunks.
"""

from __future__ import annotations

import logging
import queue
import threading
from concurrent.futures import Future
from typing import Any

from engine.config import EngineConfig
from engine.requests import EngineCrashed, GenerationRequest, GenerationResult

log = logging.getLogger(__name__)


class EngineRunner:
    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self._llm: Any = None
        self._inbox: queue.Queue[tuple[GenerationRequest, Future[GenerationResult]] | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def load(self) -> None:
        from vllm import LLM  # lazy: importing engine/ never touches a device

        log.info("loading engine for %s", self.config.model)
        self._llm = LLM(**self.config.llm_kwargs())
        self._thread = threading.Thread(target=self._loop, name="engine-loop", daemon=True)
        self._thread.start()

    def restart(self) -> None:
        with self._lock:
            self.close()
            self.load()

    def close(self) -> None:
        if self._thread is not None:
            self._inbox.put(None)
            self._thread.join(30)
            self._thread = None
        if self._llm is not None:
            engine = getattr(self._llm, "llm_engine", None)
            shutdown = getattr(getattr(engine, "engine_core", None), "shutdown", None)
            if callable(shutdown):
                shutdown()
            self._llm = None

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

        so = StructuredOutputsParams(json=req.json_schema) if req.json_schema else None
        return SamplingParams(
            max_tokens=req.max_tokens,
            temperature=req.temperature,
            structured_outputs=so,
            seed=self.config.seed,
        )

    def _loop(self) -> None:
        engine = self._llm.llm_engine
        pending: dict[str, Future[GenerationResult]] = {}
        stopping = False
        while not stopping or pending:
            try:
                block = not pending and not stopping
                while True:  # drain everything queued: the scheduler batches what it is given
                    entry = self._inbox.get(block=block, timeout=None if block else 0)
                    block = False
                    if entry is None:
                        stopping = True
                        continue
                    req, fut = entry
                    prompt: dict[str, Any] = {"prompt": req.prompt}
                    if req.images:
                        prompt["multi_modal_data"] = {"image": req.images}
                    try:
                        engine.add_request(req.request_id, prompt, self._sampling(req))
                    except Exception as exc:  # a bad request (e.g. too long) fails alone
                        fut.set_exception(exc)
                        continue
                    pending[req.request_id] = fut
            except queue.Empty:
                pass
            if not pending:
                continue
            try:
                outputs = engine.step()
            except Exception as exc:
                log.error("engine step failed with %d requests in flight: %s", len(pending), exc)
                for fut in pending.values():
                    fut.set_exception(EngineCrashed(str(exc)))
                pending.clear()
                return
            for out in outputs:
                if not out.finished:
                    continue
                if out.request_id not in pending:
                    continue
                fut = pending.pop(out.request_id)
                comp = out.outputs[0]
                fut.set_result(
                    GenerationResult(
                        request_id=out.request_id,
                        text=comp.text,
                        prompt_tokens=len(out.prompt_token_ids or []),
                        completion_tokens=len(comp.token_ids),
                        finish_reason=comp.finish_reason,
                    )
                )

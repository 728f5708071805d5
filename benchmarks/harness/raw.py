"""Arm (a): raw vLLM. One ``LLM.generate`` over every item at once, prepared exactly as the worker does.

Timed: preprocessing (the worker's thread pool) plus the generate call; the engine load and the
warm-up items are not. vLLM stays vanilla (no statistics loggers), so there is no occupancy figure;
the timeline's item counts come from ``generate``'s own progress-bar hook, silenced.
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from pathlib import Path
from typing import Any

from benchmarks.harness.inputs import group_items, split_warmup
from benchmarks.harness.result import ArmResult, Sample
from benchmarks.harness.spec import BenchSpec
from engine.runtime.chat import ChatTemplate
from engine.runtime.requests import GenerationRequest
from engine.structured import for_vllm
from engine.vision import VisionGeometry
from pipelines import image_tagging
from pipelines.documents_common import ParseError
from vlbatch.db.tenants import global_roots
from vlbatch.settings import Settings
from worker.image_prep import prepare_images

MAX_INPUT_BYTES = 50 * 1024 * 1024  # Settings.max_input_bytes


# ------------------------------------------------------------------ preparation: the worker's own code


def load_images(spec: BenchSpec, geometry: VisionGeometry, paths: list[Path]) -> list[Any]:
    """``paths`` loaded, decoded and resized inside the spec's visual-token budget, as the worker does it."""
    settings = Settings(allowed_input_roots=sorted({p.parent for p in paths}), max_input_bytes=MAX_INPUT_BYTES)
    return prepare_images(
        [str(p) for p in paths],
        geometry=geometry,
        settings=settings,
        roots=global_roots(settings),
        max_visual_tokens=spec.max_visual_tokens,
        limit=len(paths),
    )


@lru_cache(maxsize=8)
def _template(model_dir: str) -> ChatTemplate:
    return ChatTemplate.from_model_dir(model_dir)


def render_prompt(model_dir: str, system: str, user: str, n_images: int) -> str:
    """The model's chat template over ``[system, user: n images then the text]`` (the worker's renderer)."""
    return _template(model_dir).render(system, user, n_images)


def prepare_requests(
    spec: BenchSpec, model_dir: Path, photos: list[Path], *, timings: list[float] | None = None
) -> list[GenerationRequest]:
    """One request per item (``images_per_prompt`` consecutive photos), in order, as the worker builds it.

    ``timings`` receives each item's preparation cost in CPU seconds of the pool thread that did it
    (``time.thread_time``: waiting for a core or the GIL is not counted, so the figure does not grow with
    the number of threads sharing the cores).
    """
    opts = spec.tagging_options()
    geometry = VisionGeometry.from_model_dir(model_dir)
    schema = image_tagging.output_schema(opts)
    max_tokens = image_tagging.max_output_tokens(opts)

    def one(job: tuple[int, list[Path]]) -> tuple[GenerationRequest, float]:
        i, paths = job
        t0 = time.thread_time()
        images = load_images(spec, geometry, paths)
        prompt = render_prompt(
            str(model_dir), image_tagging.SYSTEM_PREFIX, image_tagging.user_prompt(opts, len(images)), len(images)
        )
        req = GenerationRequest(
            request_id=f"bench-{i}", prompt=prompt, images=images, max_tokens=max_tokens, json_schema=schema
        )
        return req, time.thread_time() - t0

    items = list(enumerate(group_items(photos, opts.images_per_prompt)))
    with ThreadPoolExecutor(spec.preprocess_threads) as pool:
        done = list(pool.map(one, items))
    if timings is not None:
        timings.extend(dt for _, dt in done)
    return [req for req, _ in done]


def sampling_params(req: GenerationRequest, *, seed: int) -> Any:
    """The runner's SamplingParams for ``req`` (``engine.runtime.runner.EngineRunner._sampling``)."""
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    so = StructuredOutputsParams(json=for_vllm(req.json_schema)) if req.json_schema else None
    return SamplingParams(max_tokens=req.max_tokens, temperature=req.temperature, structured_outputs=so, seed=seed)


def engine_prompt(req: GenerationRequest) -> Any:
    """The prompt dict ``LLM.generate``/``add_request`` take for ``req``."""
    prompt: dict[str, Any] = {"prompt": req.prompt}
    if req.images:
        prompt["multi_modal_data"] = {"image": req.images}
    return prompt


# ------------------------------------------------------------------------------------------- the arm


def _progress_recorder(t0: float, timeline: list[Sample]) -> Callable[..., Any]:
    """A silent tqdm for ``LLM.generate(use_tqdm=...)`` that notes (t, items done) on every update of the
    bar over finished requests (vLLM also wraps its prompt rendering in one, an iterable: not recorded)."""
    from tqdm import tqdm

    class Recorder(tqdm):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs["file"] = io.StringIO()
            # A command's quiet mode sets TQDM_DISABLE for libraries' bars; this one is read, not shown, and a
            # disabled bar counts nothing (and vLLM divides by its elapsed time, 0 when disabled).
            kwargs["disable"] = False
            self._record = not args and kwargs.get("iterable") is None
            super().__init__(*args, **kwargs)

        def update(self, n: float | None = 1) -> bool | None:
            out = super().update(n)
            if self._record:
                timeline.append((time.perf_counter() - t0, int(self.n), None))
            return out

    return Recorder


def parse_failures(spec: BenchSpec, texts: list[tuple[str, str | None]]) -> int:
    """How many answers the pipeline's parser rejects (the worker would fail those items)."""
    opts = spec.tagging_options()
    failed = 0
    for text, finish in texts:
        try:
            image_tagging.parse_answer(text, opts, finish_reason=finish)
        except ParseError:
            failed += 1
    return failed


def run_raw(spec: BenchSpec, model_dir: Path, photos: list[Path]) -> ArmResult:
    from vllm import LLM

    warm, timed = split_warmup(spec, photos)
    cfg = spec.engine_config(model_dir)
    llm = LLM(**cfg.llm_kwargs())
    try:
        if warm:
            reqs = prepare_requests(spec, model_dir, warm)
            llm.generate(
                [engine_prompt(r) for r in reqs], [sampling_params(r, seed=cfg.seed) for r in reqs], use_tqdm=False
            )
        timeline: list[Sample] = [(0.0, 0, None)]
        timings: list[float] = []
        t0 = time.perf_counter()
        reqs = prepare_requests(spec, model_dir, timed, timings=timings)
        prep_s = time.perf_counter() - t0
        timeline.append((prep_s, 0, None))
        outs = llm.generate(
            [engine_prompt(r) for r in reqs],
            [sampling_params(r, seed=cfg.seed) for r in reqs],
            use_tqdm=_progress_recorder(t0, timeline),
        )
        seconds = time.perf_counter() - t0
    finally:
        llm.llm_engine.engine_core.shutdown()
    texts = [(o.outputs[0].text, o.outputs[0].finish_reason) for o in outs]
    return ArmResult(
        name="raw",
        items=len(outs),
        failed=parse_failures(spec, texts),
        seconds=seconds,
        output_tokens=sum(len(o.outputs[0].token_ids) for o in outs),
        prompt_tokens=sum(len(o.prompt_token_ids or []) for o in outs),
        mean_occupancy=None,
        max_num_seqs=cfg.max_num_seqs,
        prep_ms_per_image=1000 * sum(timings) / max(len(timed), 1),
        db_ms_per_item=None,
        timeline=timeline,
        images=len(timed),
        notes=f"preprocessing phase {prep_s:.2f} s before generate ({spec.preprocess_threads} threads)",
    )

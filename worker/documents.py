"""Document items (summarize, extract, classify) as rounds for the feeder: ingest, transcribe scanned pages,
chunk, map, then the rounds the pipeline's ``combine`` asks for (summarize's reduce levels).

One item is one document, run by the feeder like any item (``worker/rounds.py``): its steps between rounds
read the file and render pages (in the parser sandbox) and store answers, so they run in the preprocessing
pool. Every model answer is stored as a ``DocumentPart`` the moment its round is back, so a redelivered
document reuses what is done. A document that cannot be read, or whose answers do not parse, fails alone
with a stable code; engine crashes and refusals are the feeder's, as for every item.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.runtime.requests import GenerationRequest, GenerationResult
from jobs.exports.document_json import write_document_json
from pipelines.base import Ask, Combine, DocumentPipeline
from pipelines.documents_common import (
    OCR_SYSTEM_PREFIX,
    ParseError,
    PassageResult,
    context_advice,
    ocr_max_output_tokens,
    ocr_prompt,
    parse_ocr,
    plan_chunks,
)
from preprocessing.chunking import CountTokens, Passage, load_token_counter
from preprocessing.documents import Document, DocumentLimits, load_document, render_page, replace_page_text
from preprocessing.documents.sandbox import ParseBounds, Sandbox, shared_sandbox
from preprocessing.images import budget_pixels, prepare_image
from preprocessing.input_errors import InputError
from preprocessing.paths import confined_path
from vlbatch.db import document_parts, outcomes
from vlbatch.errors import CONTEXT_TOO_SMALL, DOCUMENT_ERROR
from vlbatch.settings import Settings
from worker.context import WorkerContext, chat_prompt
from worker.rounds import Rounds, Step, ask, drive, failure

log = logging.getLogger(__name__)

_counters: dict[str, CountTokens] = {}
_counters_lock = threading.Lock()


def parse_sandbox(settings: Settings) -> Sandbox:
    """The process's parser children (``preprocessing.documents.sandbox.shared_sandbox``), started once per
    process and closed at exit. Reading a file and rendering a page run there, never in the worker itself."""
    bounds = ParseBounds(
        memory_bytes=settings.decoding.document_parse_memory_mb * 1024**2,
        timeout_s=settings.decoding.document_parse_timeout_s,
    )
    return shared_sandbox("documents", bounds, processes=settings.decoding.document_parse_processes)


def token_counter(model_dir: str) -> CountTokens:
    """The served model's own tokenizer, loaded once per process."""
    with _counters_lock:
        if model_dir not in _counters:
            _counters[model_dir] = load_token_counter(Path(model_dir))
        return _counters[model_dir]


@dataclass
class _Doc:
    """One document in flight: its item, job, options and the parts already stored."""

    ctx: WorkerContext
    item_id: int
    attempt: int
    job_id: str
    path: str  # as the item names it
    roots: Sequence[Path]  # the job's tenant's input roots (``JobPlan.roots``)
    ref: str
    output_dir: str | None
    pipeline: DocumentPipeline
    opts: Any
    parts: dict[tuple[str, int], dict[str, Any]]  # (stage, idx) -> the stored answer

    def store(
        self,
        stage: str,
        idx: int,
        *,
        pages: Sequence[int],
        output: dict[str, Any],
        res: GenerationResult,
        input_tokens: int = 0,
    ) -> None:
        with self.ctx.sessions() as s:
            document_parts.store_part(
                s,
                item_id=self.item_id,
                stage=stage,
                idx=idx,
                pages=pages,
                output=output,
                input_tokens=input_tokens,
                prompt_tokens=res.prompt_tokens,
                completion_tokens=res.completion_tokens,
            )
            s.commit()
        self.parts[(stage, idx)] = output

    def request(
        self,
        stage: str,
        idx: int,
        system: str,
        user: str,
        *,
        schema: dict[str, Any] | None,
        max_tokens: int,
        images: list[Any] | None = None,
    ) -> GenerationRequest:
        return GenerationRequest(
            request_id=f"item-{self.item_id}-{self.attempt}-{stage}-{idx}",
            prompt=chat_prompt(self.ctx, system, user, n_images=len(images or [])),
            images=images or [],
            max_tokens=max_tokens,
            json_schema=schema,
        )


def document_step(
    ctx: WorkerContext,
    pipeline: DocumentPipeline,
    opts: Any,
    *,
    item_id: int,
    attempt: int,
    job_id: str,
    inputs: dict[str, Any],
    roots: Sequence[Path],
    ref: str,
    output_dir: str | None,
) -> Step:
    """The first step of one document item (in the preprocessing pool): its stored parts read, then its
    rounds, ending in its outcome."""
    with ctx.sessions() as s:
        parts = document_parts.parts_of(s, item_id=item_id)
    path = str(inputs.get("path", ""))
    doc = _Doc(ctx, item_id, attempt, job_id, path, roots, ref, output_dir, pipeline, opts, parts)

    def fail(exc: Exception) -> outcomes.Outcome:
        if isinstance(exc, InputError):
            return failure(item_id, job_id, exc.code, exc.message)
        if isinstance(exc, ParseError):
            return failure(item_id, job_id, exc.code, str(exc))
        log.error("document item %d failed", item_id, exc_info=exc)
        return failure(item_id, job_id, DOCUMENT_ERROR, f"{type(exc).__name__}: {exc}")

    return drive(run_document(doc), finish=lambda output: _finish(doc, output), fail=fail)


def _finish(doc: _Doc, output: dict[str, Any]) -> outcomes.Outcome:
    """The document's outcome: its tokens are those of every stored part (earlier attempts' too)."""
    with doc.ctx.sessions() as s:
        prompt, completion = document_parts.token_totals(s, item_id=doc.item_id)
    if doc.output_dir:
        write_document_json(Path(doc.output_dir), Path(doc.path or doc.ref), output, item_id=doc.item_id)
    return outcomes.Outcome(doc.item_id, doc.job_id, output, None, prompt, completion)


def run_document(doc: _Doc) -> Rounds[dict[str, Any]]:
    """Ingest, transcribe, chunk, map and combine one document, a round at a time; returns the result
    row's ``output``."""
    path = confined_path(doc.path, doc.roots)
    limits = DocumentLimits(max_bytes=doc.ctx.settings.limits.max_input_bytes)
    document = parse_sandbox(doc.ctx.settings).call(load_document, path, limits=limits, what=str(path))
    document = yield from _transcribe(doc, path, document)
    count = token_counter(doc.ctx.runner.config.model)
    pipeline, opts = doc.pipeline, doc.opts
    try:
        chunks = plan_chunks(
            document,
            count,
            opts,
            max_model_len=doc.ctx.runner.config.max_model_len,
            system=pipeline.system_prefix,
            build_user=lambda c: pipeline.map_prompt(c, opts, total_pages=document.page_count),
            max_output_tokens=pipeline.max_output_tokens(opts),
        )
    except ValueError as exc:  # options that cannot fit this engine's context
        max_len, pages = doc.ctx.runner.config.max_model_len, document.page_count
        advice = context_advice(pipeline, opts, count, str(exc), max_model_len=max_len, total_pages=pages)
        raise InputError(CONTEXT_TOO_SMALL, advice) from exc
    chunks = pipeline.select_chunks(chunks, opts)
    results = yield from _map(doc, document, chunks)
    combine = pipeline.combine(
        results, opts, count, max_model_len=doc.ctx.runner.config.max_model_len, stored=doc.parts
    )
    answer = yield from _combine(doc, combine)
    return {
        **answer,
        "document": {
            "pages": document.page_count,
            "format": document.format,
            "content_hash": document.content_hash,
            "ocr_pages": sorted(idx for stage, idx in doc.parts if stage == "ocr"),
            "chunks": len(chunks),
        },
    }


def _transcribe(doc: _Doc, path: Path, document: Document) -> Rounds[Document]:
    """Scanned pages go to the vision model as page images within the job's visual-token budget."""
    if not document.ocr_pages or not doc.opts.ocr:
        return document
    geo = doc.ctx.geometry
    max_px = min(
        budget_pixels(doc.opts.max_page_visual_tokens, patch_size=geo.patch_size, merge_size=geo.merge_size),
        geo.max_pixels,
    )
    texts = {n: str(doc.parts[("ocr", n)].get("text", "")) for n in document.ocr_pages if ("ocr", n) in doc.parts}
    todo = [n for n in document.ocr_pages if n not in texts]
    requests = []
    sandbox = parse_sandbox(doc.ctx.settings)
    for n in todo:
        page = sandbox.call(render_page, path, n, max_pixels=max_px, what=f"{path} page {n}")
        image = prepare_image(page, factor=geo.factor, min_pixels=min(max_px, geo.min_pixels), max_pixels=max_px)
        requests.append(
            doc.request(
                "ocr",
                n,
                OCR_SYSTEM_PREFIX,
                ocr_prompt(n, document.page_count),
                schema=None,
                max_tokens=ocr_max_output_tokens(doc.opts),
                images=[image],
            )
        )
    for n, res in zip(todo, (yield from ask(requests)), strict=True):
        texts[n] = parse_ocr(res.text, doc.opts)
        doc.store("ocr", n, pages=[n], output={"text": texts[n]}, res=res)
    return replace_page_text(document, texts)


def _map(doc: _Doc, document: Document, chunks: Sequence[Passage]) -> Rounds[list[PassageResult]]:
    pipeline, opts = doc.pipeline, doc.opts
    answers = {c.index: doc.parts[("map", c.index)] for c in chunks if ("map", c.index) in doc.parts}
    todo = [c for c in chunks if c.index not in answers]
    requests = [
        doc.request(
            "map",
            c.index,
            pipeline.system_prefix,
            pipeline.map_prompt(c, opts, total_pages=document.page_count),
            schema=pipeline.output_schema(opts),
            max_tokens=pipeline.max_output_tokens(opts),
        )
        for c in todo
    ]
    failed: ParseError | None = None
    for chunk, res in zip(todo, (yield from ask(requests)), strict=True):
        try:
            answers[chunk.index] = pipeline.parse(res.text, opts, finish_reason=res.finish_reason)
        except ParseError as exc:  # the chunks that did parse stay stored, to inspect beside the error
            failed = failed or ParseError(f"chunk {chunk.index} (pages {list(chunk.pages)}): {exc}", code=exc.code)
            continue
        doc.store(
            "map", chunk.index, pages=chunk.pages, output=answers[chunk.index], res=res, input_tokens=chunk.token_count
        )
    if failed is not None:
        raise failed
    return [PassageResult(c.index, tuple(c.pages), answers[c.index]) for c in chunks]


def _combine(doc: _Doc, combine: Combine) -> Rounds[dict[str, Any]]:
    """The pipeline's combining rounds: each ask goes to the engine, its answer is parsed and stored as the
    part the ask names, and the answers go back to the pipeline."""
    pipeline, opts = doc.pipeline, doc.opts
    try:
        asks: list[Ask] = next(combine)
        while True:
            requests = [
                doc.request(a.stage, a.idx, a.system, a.user, schema=a.schema, max_tokens=a.max_tokens) for a in asks
            ]
            answers = []
            for a, res in zip(asks, (yield from ask(requests)), strict=True):
                answer = pipeline.parse(res.text, opts, finish_reason=res.finish_reason)
                doc.store(a.stage, a.idx, pages=a.pages, output=answer, res=res)
                answers.append(answer)
            asks = combine.send(answers)
    except StopIteration as stop:
        return stop.value

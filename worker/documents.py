"""Document items (summarize, extract, classify): ingest, transcribe scanned pages, chunk, map, reduce.

One item is one document. Every model answer is stored as a ``DocumentPart`` the moment it is parsed, so
a redelivered document reuses what is done: the reduce (or merge) step runs from what the database holds
once every map part is there, with no Celery chord. All requests of a stage go to the engine together,
and the documents of a chunk run side by side, so the engine stays full. A document that cannot be read,
or whose answers do not parse, fails alone with a stable code.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import func, select, update

from engine.runtime.requests import EngineCrashed, GenerationRequest, GenerationResult
from pipelines import registry, summarize
from pipelines.base import DocumentPipeline
from pipelines.documents_common import (
    OCR_SYSTEM_PREFIX,
    ChunkResult,
    ParseError,
    ocr_max_output_tokens,
    ocr_prompt,
    parse_ocr,
    plan_chunks,
)
from preprocessing.chunking import Chunk, CountTokens, load_token_counter
from preprocessing.documents import Document, DocumentLimits, load_document, render_page, replace_page_text
from preprocessing.documents.sandbox import ParseBounds, Sandbox
from preprocessing.errors import InputError
from preprocessing.images import budget_pixels, prepare_image
from vlbatch.db import crud
from vlbatch.db.models import DocumentPart, Item, Job
from vlbatch.errors import CONTEXT_TOO_SMALL, DOCUMENT_ERROR, ENGINE_CRASH, NOT_FOUND, OUTSIDE_ROOTS
from vlbatch.settings import Settings
from worker.context import WorkerContext, chat_prompt

log = logging.getLogger(__name__)

# A document under which the engine crashed this often fails as engine_crash. Only real crashes count
# (items.crash_count), not claims: a chunk handed back at shutdown or redelivered after a lost lease is no crash.
MAX_DOCUMENT_CRASHES = 3

BookTokens = Callable[[str, int], None]  # (job id, tokens): the energy ledger's add_tokens

_counters: dict[str, CountTokens] = {}
_counters_lock = threading.Lock()
_sandboxes: dict[tuple[ParseBounds, int], Sandbox] = {}
_sandboxes_lock = threading.Lock()


def parse_sandbox(settings: Settings) -> Sandbox:
    """The process's parser children (``preprocessing.documents.sandbox``), built once per set of bounds and
    closed at exit. Reading a file and rendering a page run there, never in the worker itself."""
    bounds = ParseBounds(
        memory_bytes=settings.document_parse_memory_mb * 1024**2, timeout_s=settings.document_parse_timeout_s
    )
    key = (bounds, settings.document_parse_processes)
    with _sandboxes_lock:
        if key not in _sandboxes:
            _sandboxes[key] = Sandbox(bounds, processes=settings.document_parse_processes)
            atexit.register(_sandboxes[key].close)
        return _sandboxes[key]


def token_counter(model_dir: str) -> CountTokens:
    """The served model's own tokenizer, loaded once per process."""
    with _counters_lock:
        if model_dir not in _counters:
            _counters[model_dir] = load_token_counter(Path(model_dir))
        return _counters[model_dir]


@dataclass
class _Doc:
    """One document in flight: its job, options and the parts already stored."""

    ctx: WorkerContext
    job: Job
    item: Item
    pipeline: DocumentPipeline
    opts: Any
    parts: dict[tuple[str, int], DocumentPart]
    on_tokens: BookTokens | None = None

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        futures = self.ctx.runner.submit(list(requests))
        results = []
        for f in futures:
            res = f.result()
            # Booked as each answer arrives, so a long document's energy falls in the intervals it ran in
            # (and tokens spent on a document that fails later still cost what they cost).
            if self.on_tokens is not None:
                self.on_tokens(self.job.id, res.prompt_tokens + res.completion_tokens)
            results.append(res)
        return results

    def store(
        self,
        stage: str,
        idx: int,
        *,
        pages: Sequence[int],
        output: dict[str, Any],
        res: GenerationResult | None,
        input_tokens: int = 0,
    ) -> None:
        values = {
            "item_id": self.item.id,
            "stage": stage,
            "idx": idx,
            "pages": list(pages),
            "output": output,
            "input_tokens": input_tokens,
            "prompt_tokens": res.prompt_tokens if res else 0,
            "completion_tokens": res.completion_tokens if res else 0,
            "created_at": crud.utcnow(),
        }
        with self.ctx.sessions() as s:
            s.execute(crud.upsert(s, DocumentPart, values, keys=["item_id", "stage", "idx"]))
            s.commit()

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
            request_id=f"item-{self.item.id}-{self.item.attempts}-{stage}-{idx}",
            prompt=chat_prompt(self.ctx, system, user, n_images=len(images or [])),
            images=images or [],
            max_tokens=max_tokens,
            json_schema=schema,
        )


def process_document_items(
    ctx: WorkerContext, job: Job, items: Sequence[Item], *, on_tokens: BookTokens | None = None
) -> int:
    """Run a chunk's documents side by side; returns how many reached a terminal state. ``on_tokens`` is
    told each engine answer's tokens (prompt + output) for the job, as the feeder books energy by tokens."""
    pipeline = registry.document_pipeline(job.pipeline)
    opts = pipeline.options(job.options)
    with ThreadPoolExecutor(max_workers=max(1, len(items)), thread_name_prefix="doc") as pool:
        outcomes = list(pool.map(lambda it: _outcome(ctx, job, pipeline, opts, it, on_tokens), items))
    done = 0
    for outcome in outcomes:
        if outcome is not None:
            done += _record(ctx, job, outcome)
    return done


def _outcome(
    ctx: WorkerContext, job: Job, pipeline: DocumentPipeline, opts: Any, item: Item, on_tokens: BookTokens | None
) -> crud.Outcome | None:
    if item.crash_count >= MAX_DOCUMENT_CRASHES:
        msg = f"the engine crashed {item.crash_count} times while running this document"
        return crud.Outcome(item.id, job.id, None, None, 0, 0, ENGINE_CRASH, msg)
    with ctx.sessions() as s:
        stored = s.scalars(select(DocumentPart).where(DocumentPart.item_id == item.id))
        parts = {(p.stage, p.idx): p for p in stored}
    doc = _Doc(ctx, job, item, pipeline, opts, parts, on_tokens)
    try:
        output = run_document(doc)
    except InputError as exc:
        return crud.Outcome(item.id, job.id, None, None, 0, 0, exc.code, exc.message)
    except ParseError as exc:
        return crud.Outcome(item.id, job.id, None, None, 0, 0, exc.code, str(exc))
    except EngineCrashed as exc:
        # Left running: the chunk is not done, and the reconciler re-sends it once its lease lapses. The
        # parts stored so far are reused then.
        log.error("engine crashed on document item %d (%d in flight); restarting", item.id, exc.in_flight)
        ctx.runner.restart(crashed_generation=exc.generation)
        crashes = _count_crash(ctx, item)
        if crashes >= MAX_DOCUMENT_CRASHES:
            msg = f"the engine crashed {crashes} times while running this document"
            return crud.Outcome(item.id, job.id, None, None, 0, 0, ENGINE_CRASH, msg)
        return None
    except Exception as exc:  # the engine refused a request (e.g. longer than max_model_len)
        log.exception("document item %d failed", item.id)
        return crud.Outcome(item.id, job.id, None, None, 0, 0, DOCUMENT_ERROR, f"{type(exc).__name__}: {exc}")
    with ctx.sessions() as s:
        prompt, completion = s.execute(
            select(
                func.coalesce(func.sum(DocumentPart.prompt_tokens), 0),
                func.coalesce(func.sum(DocumentPart.completion_tokens), 0),
            ).where(DocumentPart.item_id == item.id)
        ).one()
    if job.output_dir:
        _write_json(Path(job.output_dir), Path(str(item.inputs.get("path", item.ref))), output, item_id=item.id)
    return crud.Outcome(item.id, job.id, output, None, int(prompt), int(completion))


def _count_crash(ctx: WorkerContext, item: Item) -> int:
    """One more engine crash booked on ``item``; the new count."""
    with ctx.sessions() as s:
        s.execute(update(Item).where(Item.id == item.id).values(crash_count=Item.crash_count + 1))
        count = s.scalar(select(Item.crash_count).where(Item.id == item.id))
        s.commit()
    return int(count or 0)


def run_document(doc: _Doc) -> dict[str, Any]:
    """Ingest, transcribe, chunk, map and reduce one document; the result row's ``output``."""
    path = _confined(str(doc.item.inputs.get("path", "")), doc.ctx.settings.allowed_input_roots)
    limits = DocumentLimits(max_bytes=doc.ctx.settings.max_input_bytes)
    document = parse_sandbox(doc.ctx.settings).call(load_document, path, limits=limits, what=str(path))
    document = _transcribe(doc, path, document)
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
        raise InputError(CONTEXT_TOO_SMALL, str(exc)) from exc
    chunks = pipeline.select_chunks(chunks, opts)
    results = _map(doc, document, chunks)
    answer = _reduce(doc, results, count) if pipeline.reduces else pipeline.merge(results, opts)
    return {
        **answer,
        "document": {
            "pages": document.page_count,
            "format": document.format,
            "content_hash": document.content_hash,
            "ocr_pages": sorted(_ocr_done(doc)),
            "chunks": len(chunks),
        },
    }


def _confined(raw: str, roots: Sequence[Path]) -> Path:
    try:
        path = Path(raw).expanduser().resolve(strict=True)
    except (OSError, RuntimeError) as exc:
        raise InputError(NOT_FOUND, f"{raw}: no such file") from exc
    if not any(path.is_relative_to(Path(r).resolve()) for r in roots):
        raise InputError(OUTSIDE_ROOTS, f"{raw} resolves outside the allowed roots")
    return path


def _ocr_done(doc: _Doc) -> set[int]:
    return {idx for stage, idx in doc.parts if stage == "ocr"}


def _transcribe(doc: _Doc, path: Path, document: Document) -> Document:
    """Scanned pages go to the vision model as page images within the job's visual-token budget."""
    if not document.ocr_pages or not doc.opts.ocr:
        return document
    geo = doc.ctx.geometry
    max_px = min(
        budget_pixels(doc.opts.max_page_visual_tokens, patch_size=geo.patch_size, merge_size=geo.merge_size),
        geo.max_pixels,
    )
    texts = {
        n: str((doc.parts[("ocr", n)].output or {}).get("text", ""))
        for n in document.ocr_pages
        if ("ocr", n) in doc.parts
    }
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
    for n, res in zip(todo, doc.generate(requests), strict=True):
        texts[n] = parse_ocr(res.text, doc.opts)
        doc.store("ocr", n, pages=[n], output={"text": texts[n]}, res=res)
        doc.parts[("ocr", n)] = DocumentPart(output={"text": texts[n]})
    return replace_page_text(document, texts)


def _map(doc: _Doc, document: Document, chunks: Sequence[Chunk]) -> list[ChunkResult]:
    pipeline, opts = doc.pipeline, doc.opts
    answers: dict[int, dict[str, Any]] = {
        c.index: dict(doc.parts[("map", c.index)].output or {}) for c in chunks if ("map", c.index) in doc.parts
    }
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
    for chunk, res in zip(todo, doc.generate(requests), strict=True):
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
    return [ChunkResult(c.index, tuple(c.pages), answers[c.index]) for c in chunks]


def _reduce(doc: _Doc, results: Sequence[ChunkResult], count: Callable[[str], int]) -> dict[str, Any]:
    """Summaries of consecutive parts combined level by level until one is left (a tree when they do not
    fit one prompt). Each level is planned from the real token counts of the summaries in hand."""
    opts = doc.opts
    parts = [summarize.PartSummary(r.answer["summary"], r.pages, count(r.answer["summary"])) for r in results]
    levels: list[int] = []
    level = 0
    while len(parts) > 1:
        level += 1
        groups = summarize.plan_next_level(parts, opts, count, max_model_len=doc.ctx.runner.config.max_model_len)
        final = len(groups) == 1
        stage = f"reduce{level}"
        merged: dict[int, summarize.PartSummary] = {}
        requests, asked = [], []
        for gi, group in enumerate(groups):
            members = [parts[i] for i in group.inputs]
            pages = tuple(sorted({p for m in members for p in m.pages}))
            if group.carried:
                merged[gi] = members[0]
            elif (stage, gi) in doc.parts:
                text = str((doc.parts[(stage, gi)].output or {})["summary"])
                merged[gi] = summarize.PartSummary(text, pages, count(text))
            else:
                requests.append(
                    doc.request(
                        stage,
                        gi,
                        summarize.SYSTEM_PREFIX,
                        summarize.reduce_prompt(members, opts, final=final),
                        schema=summarize.output_schema(opts),
                        max_tokens=summarize.max_output_tokens(opts),
                    )
                )
                asked.append((gi, pages))
        for (gi, pages), res in zip(asked, doc.generate(requests), strict=True):
            answer = summarize.parse_answer(res.text, opts, finish_reason=res.finish_reason)
            doc.store(stage, gi, pages=pages, output=answer, res=res)
            merged[gi] = summarize.PartSummary(answer["summary"], pages, count(answer["summary"]))
        levels.append(len(groups))
        parts = [merged[gi] for gi in range(len(groups))]
    return {"summary": parts[0].text, "pages": list(parts[0].pages), "map_parts": len(results), "reduce_levels": levels}


def _write_json(folder: Path, source: Path, output: dict[str, Any], *, item_id: int) -> None:
    """``<folder>/<file name>.json``, written to a temporary name and renamed so readers never see half.
    Two documents with one file name (from different folders) keep apart by the second's item id."""
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{source.name}.json"
    if target.exists():
        try:
            taken = json.loads(target.read_text()).get("source") != str(source)
        except (OSError, ValueError):
            taken = False
        if taken:
            target = folder / f"{source.name}.{item_id}.json"
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"source": str(source), **output}, ensure_ascii=False, indent=2))
    tmp.replace(target)


def _record(ctx: WorkerContext, job: Job, outcome: crud.Outcome) -> int:
    with ctx.sessions() as s:
        ok = crud.record_outcome(
            s,
            outcome=outcome,
            model=ctx.model_name,
            model_revision=ctx.model_revision,
            pipeline_version=registry.get(job.pipeline).version,
            options_hash=job.options_hash,
        )
        s.commit()
    return int(ok)

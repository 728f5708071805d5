"""Processes one chunk: claim with a lease, preprocess off the engine thread, generate, upsert results.

Shared by the Celery task and the embedded runner. Every failure of one input becomes that item's
error code. An engine crash restarts the engine once (however many chunks saw it) and retries the
items that were in it as solo requests, which the engine runs with nothing beside them, so a crash
is pinned on the item that causes it; an item that crashes it twice alone fails (invariant 5).
"""

from __future__ import annotations

import logging
import math
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker

from engine.requests import EngineCrashed, GenerationRequest, GenerationResult
from engine.runner import EngineRunner
from engine.vision import VisionGeometry
from pipelines import image_tagging
from preprocessing.errors import InputError
from preprocessing.images import budget_pixels, decode_image, load_source, prepare_image
from vlbatch.db import crud
from vlbatch.db.models import Item, Job
from vlbatch.settings import Settings

log = logging.getLogger(__name__)

MAX_CRASHES_PER_ITEM = 2


@dataclass
class ProcessorContext:
    settings: Settings
    sessions: sessionmaker[Session]
    runner: EngineRunner
    model_name: str
    owner: str
    pool: ThreadPoolExecutor
    geometry: VisionGeometry = field(default_factory=VisionGeometry)
    chat_prefix: str = "<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n"
    image_placeholder: str = "<|vision_start|><|image_pad|><|vision_end|>"
    chat_suffix: str = "{text}<|im_end|>\n<|im_start|>assistant\n"


def chat_prompt(ctx: ProcessorContext, system: str, user: str, *, n_images: int = 0) -> str:
    # The system prefix comes first and is the same for every item of a pipeline, so prefix caching reuses
    # its KV; the images come before the text that asks about them.
    return ctx.chat_prefix.format(system=system) + ctx.image_placeholder * n_images + ctx.chat_suffix.format(text=user)


def build_prompt(ctx: ProcessorContext, opts: image_tagging.TaggingOptions, n_images: int) -> str:
    return chat_prompt(ctx, image_tagging.SYSTEM_PREFIX, image_tagging.user_prompt(opts, n_images), n_images=n_images)


def prepare_item(ctx: ProcessorContext, item: Item, opts: image_tagging.TaggingOptions) -> GenerationRequest:
    """Load and resize an item's images inside the job's visual-token budget (runs in the pool)."""
    sources: list[str] = list(item.inputs.get("images", []))
    limit = min(opts.images_per_prompt, ctx.runner.config.limit_images_per_prompt)
    if len(sources) > limit:
        raise InputError("too_many_images", f"{len(sources)} images in one prompt; the limit is {limit}")
    geo = ctx.geometry
    # Never above the model processor's own max_pixels: it would shrink the image again and the token
    # count we budgeted would no longer be the one the engine sees.
    max_px = min(
        budget_pixels(opts.max_visual_tokens, patch_size=geo.patch_size, merge_size=geo.merge_size), geo.max_pixels
    )
    min_px = min(max_px, geo.min_pixels)
    # JPEG draft decoding at >= 2x the target side keeps detail for the final resize and skips most IDCT work.
    side = 2 * math.isqrt(max_px)
    images = []
    for src in sources:
        data = load_source(
            src,
            allowed_roots=ctx.settings.allowed_input_roots,
            max_bytes=ctx.settings.max_input_bytes,
            url_timeout_s=ctx.settings.url_timeout_s,
        )
        img = decode_image(data, draft_size=(side, side))
        images.append(prepare_image(img, factor=geo.factor, min_pixels=min_px, max_pixels=max_px))
    return GenerationRequest(
        request_id=f"item-{item.id}-{item.attempts}",
        prompt=build_prompt(ctx, opts, len(images)),
        images=images,
        max_tokens=image_tagging.max_output_tokens(opts),
        json_schema=image_tagging.output_schema(opts),
    )


def _outcome(
    item: Item, res: GenerationResult | None, err: tuple[str, str] | None, opts: image_tagging.TaggingOptions
) -> crud.Outcome:
    if err is None and res is not None:
        try:
            output: dict[str, Any] | None = image_tagging.parse_answer(res.text, opts, finish_reason=res.finish_reason)
        except image_tagging.ParseError as exc:
            output, err = None, (exc.code, str(exc))
    else:
        output = None
    return crud.Outcome(
        item_id=item.id,
        job_id=item.job_id,
        output=output,
        raw_text=res.text if res else None,
        prompt_tokens=res.prompt_tokens if res else 0,
        completion_tokens=res.completion_tokens if res else 0,
        error_code=err[0] if err else None,
        error_message=err[1] if err else None,
    )


def process_chunk(ctx: ProcessorContext, chunk_id: int) -> int:
    """Run one chunk to the end; returns how many items this call finished. Idempotent."""
    with ctx.sessions() as s:
        items = crud.claim_chunk(
            s, chunk_id=chunk_id, owner=ctx.owner, lease=timedelta(seconds=ctx.settings.lease_seconds)
        )
        job = s.get(Job, items[0].job_id) if items else None
        s.commit()
    if not items or job is None:
        return 0
    if job.pipeline == image_tagging.NAME:
        done = _process_tagging(ctx, job, items, chunk_id)
    else:
        from worker.documents import process_document_items  # imports the document libraries on first use

        done = process_document_items(ctx, job, items)
    with ctx.sessions() as s:
        crud.finish_chunk(s, chunk_id=chunk_id, owner=ctx.owner)
        s.commit()
    return done


def _process_tagging(ctx: ProcessorContext, job: Job, items: list[Item], chunk_id: int) -> int:
    opts = image_tagging.TaggingOptions.model_validate(job.options)
    prepared = {it.id: ctx.pool.submit(prepare_item, ctx, it, opts) for it in items}
    done = 0
    todo = list(items)
    suspects: set[int] = set()  # were in the engine when it crashed: retried solo, so a crash names its item
    while todo:
        futures: dict[int, Future[GenerationResult]] = {}
        outcomes: list[crud.Outcome] = []
        for it in todo:
            try:
                req = prepared[it.id].result()
            except InputError as exc:
                outcomes.append(_outcome(it, None, (exc.code, exc.message), opts))
                continue
            except Exception as exc:  # an unexpected decoder failure is still one item's failure
                outcomes.append(_outcome(it, None, ("preprocess_error", repr(exc)), opts))
                continue
            futures[it.id] = ctx.runner.submit([replace(req, solo=it.id in suspects)])[0]
        crashed: list[tuple[Item, EngineCrashed]] = []
        for it in todo:
            fut = futures.get(it.id)
            if fut is None:
                continue
            try:
                outcomes.append(_outcome(it, fut.result(), None, opts))
            except EngineCrashed as exc:
                crashed.append((it, exc))
            except Exception as exc:  # rejected by the engine (e.g. prompt over max_model_len)
                outcomes.append(_outcome(it, None, ("engine_rejected", str(exc)), opts))
        done += _write(ctx, job, outcomes)
        if not crashed:
            break
        first = crashed[0][1]
        log.error("engine crashed on chunk %d (%d requests in flight); restarting", chunk_id, first.in_flight)
        for it, crash in crashed:
            if crash.in_flight == 1:  # it ran alone: the crash is its own
                done += _blame(ctx, job, it)
            if crash.in_flight:
                suspects.add(it.id)
        ctx.runner.restart(crashed_generation=first.generation)
        todo = [it for it, _ in crashed if not _gave_up(it)]
    return done


def _blame(ctx: ProcessorContext, job: Job, item: Item) -> int:
    """Count a crash against an item; after MAX_CRASHES_PER_ITEM it fails as ``engine_crash``."""
    item.crash_count += 1
    with ctx.sessions() as s:
        s.execute(update(Item).where(Item.id == item.id).values(crash_count=item.crash_count))
        s.commit()
    if item.crash_count < MAX_CRASHES_PER_ITEM:
        return 0
    msg = f"the engine crashed {item.crash_count} times while running this item alone"
    return _write(ctx, job, [crud.Outcome(item.id, item.job_id, None, None, 0, 0, "engine_crash", msg)])


def _gave_up(item: Item) -> bool:
    return item.crash_count >= MAX_CRASHES_PER_ITEM


def _write(ctx: ProcessorContext, job: Job, outcomes: list[crud.Outcome]) -> int:
    if not outcomes:
        return 0
    with ctx.sessions() as s:
        n = sum(
            crud.record_outcome(
                s,
                outcome=o,
                model=ctx.model_name,
                model_revision=None,
                pipeline_version=image_tagging.VERSION,
                options_hash=job.options_hash,
            )
            for o in outcomes
        )
        s.commit()
    return n

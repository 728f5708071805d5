"""What the feeder holds of a claimed item, its job's plan, and how an item of each kind starts: the first
step (``worker/rounds.py``) of an image or video item, a request line or a document."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from engine.runtime.requests import GenerationRequest, GenerationResult
from pipelines import registry
from pipelines.base import DocumentPipeline, ImagePipeline, Pipeline, RequestPipeline
from preprocessing.input_errors import InputError
from preprocessing.video import is_video_source
from vlbatch.db import outcomes, tenants
from vlbatch.db.models import Item, Job
from vlbatch.errors import FILE_NAME_NOT_UTF8, INVALID_OPTIONS, OUTSIDE_ROOTS, UNKNOWN_PIPELINE
from vlbatch.inputs import NAME_NOT_UTF8
from vlbatch.paths import lexically_inside
from worker.context import WorkerContext
from worker.image_prep import build_requests, image_limit, load_images
from worker.request_body_prep import build_request_item
from worker.reuse import content_hash
from worker.rounds import Round, Step, Waiting, answers_round


@dataclass
class JobPlan:
    job: Job
    pipeline: Pipeline | None
    opts: Any
    marker: outcomes.Marker
    roots: tenants.Roots  # the job's tenant's, asked once (``roots_of``): every read and write of its items
    error: tuple[str, str] | None = None  # a configuration error: every item of the job fails with it


class JobPlans:
    """The plans of the jobs a feeder runs, made once per job (``job_plan``) and bounded: a long-lived worker sees
    many jobs."""

    def __init__(self, ctx: WorkerContext, limit: int = 256) -> None:
        self._ctx, self._limit = ctx, limit
        self._plans: dict[str, JobPlan] = {}

    def of(self, job: Job) -> JobPlan:
        plan = self._plans.get(job.id)
        if plan is None:
            plan = job_plan(self._ctx, job)
            if len(self._plans) >= self._limit:
                self._plans.clear()
            self._plans[job.id] = plan
        return plan


def job_plan(ctx: WorkerContext, job: Job) -> JobPlan:
    """The job's pipeline and options, or the configuration error all its items fail with."""
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
    marker = outcomes.Marker(ctx.model_name, ctx.model_revision, version, job.options_hash)
    with ctx.sessions() as s:
        roots = tenants.roots_of(s, ctx.settings, job.tenant)
    return JobPlan(job, pipeline, opts, marker, roots, error)


@dataclass
class Held:
    """One item between its claim and its written outcome, and the round it is in."""

    id: int
    chunk_id: int
    plan: JobPlan
    attempt: int
    crash_count: int
    ref: str | None
    inputs: dict[str, Any]
    round: Round | None = None
    results: dict[int, GenerationResult] = field(default_factory=dict)  # of this round, by request
    answered: set[int] = field(default_factory=set)  # requests of this round whose answer is back (a crash is none)
    suspect: bool = False  # was in the engine when it crashed: retried solo
    retries: int = 0
    finished: bool = False  # its outcome is taken: later answers of the round are dropped
    content_hash: str | None = None  # of an image item's bytes, once read (``worker/reuse.py``)

    @property
    def requests(self) -> list[GenerationRequest]:
        return self.round.requests if self.round is not None else []

    @property
    def sources(self) -> list[str]:
        return list(self.inputs.get("images", []))


def held_of(item: Item, plan: JobPlan) -> Held:
    return Held(item.id, item.chunk_id, plan, item.attempts, item.crash_count, item.ref, dict(item.inputs or {}))


def first_step(
    ctx: WorkerContext, held: Held, *, reuse: Callable[[Held], outcomes.Outcome | Waiting | None] | None = None
) -> Step | Waiting:
    """The item's first round (or its outcome), built in the preprocessing pool; ``InputError`` names a bad
    input. An image item's bytes are hashed as they are read; ``reuse`` (the feeder's duplicates) may then answer
    it from a stored result or make it wait for a held duplicate, before anything is decoded."""
    pipeline, opts, job = held.plan.pipeline, held.plan.opts, held.plan.job
    if held.inputs.get(NAME_NOT_UTF8):
        raise InputError(FILE_NAME_NOT_UTF8, f"{held.ref}: the file name is not UTF-8; rename the file")
    if isinstance(pipeline, DocumentPipeline):
        outputs = held.plan.roots.outputs
        if job.output_dir and not lexically_inside(job.output_dir, outputs):  # the roots were narrowed since
            raise InputError(OUTSIDE_ROOTS, f"the job's output_dir {job.output_dir} is outside its output roots")
        from worker.documents import document_step  # imports the document libraries on first use

        return document_step(
            ctx,
            pipeline,
            opts,
            item_id=held.id,
            attempt=held.attempt,
            job_id=job.id,
            inputs=held.inputs,
            roots=held.plan.roots.inputs,
            ref=held.ref or "",
            output_dir=job.output_dir,
        )
    if isinstance(pipeline, RequestPipeline):
        body = held.inputs.get("body") or {}
        requests = build_request_item(
            ctx, pipeline, opts, item_id=held.id, attempt=held.attempt, body=body, roots=held.plan.roots
        )
        return answers_round(pipeline, opts, item_id=held.id, job_id=job.id, requests=requests)
    assert isinstance(pipeline, ImagePipeline)
    data: list[bytes] | None = None
    if not any(is_video_source(src) for src in held.sources):
        limit = image_limit(ctx, pipeline, opts)
        data = load_images(held.sources, settings=ctx.settings, roots=held.plan.roots, limit=limit)
        held.content_hash = content_hash(data)
        if reuse is not None and pipeline.reuses(opts):
            found = reuse(held)
            if found is not None:
                return found
    prepared = build_requests(
        ctx,
        pipeline,
        opts,
        item_id=held.id,
        attempt=held.attempt,
        sources=held.sources,
        roots=held.plan.roots,
        data=data,
    )
    return answers_round(
        pipeline,
        opts,
        item_id=held.id,
        job_id=job.id,
        requests=prepared.requests,
        photos=prepared.photos,
        again=prepared.again,
    )

"""How a job-creating request becomes a ``jobs.submit.JobRequest``: the Idempotency-Key and the request's hash, the
body's items as the service takes them, and the job's answer. Every create route reads its body into a ``NewJob``
and hands it to the one handler, ``create_out``; the routes in ``api.routes.jobs`` stay adapters."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Header, Request, Response
from pydantic import BaseModel, ValidationError
from sqlalchemy.orm import Session

from api.deps import Principal
from api.http_errors import RequestRefused
from api.job_views import job_out
from api.schemas import (
    DocumentIn,
    DocumentJobCreate,
    EstimateOut,
    FigureOut,
    ItemIn,
    ItemTokensOut,
    JobCreate,
    JobOut,
    TaggingJobCreate,
)
from jobs.estimate import Estimate
from jobs.item_streams import ItemStream
from jobs.new_items import document_items, image_items, output_dir_of
from jobs.request import JobRequest
from jobs.submit import create, replayed
from jobs.submit import dry_run as jobs_dry_run
from pipelines.base import ImagePipeline, Pipeline, PipelineKind
from vlbatch.db import job_store, tenants
from vlbatch.errors import (
    ACTIVE_JOBS_QUOTA_EXCEEDED,
    DEADLINE_UNMEETABLE,
    DRY_RUN_BUSY,
    IDEMPOTENCY_KEY_REUSED,
    INPUT_PATH_REFUSED,
    INVALID_ITEMS,
    ITEMS_QUOTA_EXCEEDED,
    MODEL_NOT_SERVED,
    NO_INPUTS,
    NO_MODEL,
    TOO_MANY_ITEMS,
)
from vlbatch.settings import Settings

# What every route that makes a job from a request can refuse (``jobs.new_items``, ``jobs.submit``).
NEW_JOB_REFUSALS = (
    IDEMPOTENCY_KEY_REUSED,
    TOO_MANY_ITEMS,
    NO_INPUTS,
    INPUT_PATH_REFUSED,
    NO_MODEL,
    ITEMS_QUOTA_EXCEEDED,
    ACTIVE_JOBS_QUOTA_EXCEEDED,
    DEADLINE_UNMEETABLE,
    MODEL_NOT_SERVED,
    DRY_RUN_BUSY,
)

# Visible ASCII only: a key is an opaque token (a UUID, say), and NUL or control characters in it are refused (422)
# before the database sees them.
IdempotencyKey = Annotated[str | None, Header(min_length=1, max_length=200, pattern=r"^[!-~]+$")]


def request_hash(request: Request, body: BaseModel) -> str:
    """What a request asks for, as kept with its Idempotency-Key: the route and the validated body (so key order,
    spacing and spelled-out defaults do not count as another request)."""
    text = json.dumps([request.url.path, body.model_dump(mode="json")], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def replayed_out(
    session: Session, settings: Settings, key: str | None, hashed: str, principal: Principal
) -> JobOut | None:
    """The answer of the job an earlier request with this key made (``jobs.submit.replayed``), if any."""
    old = replayed(session, tenant=principal.tenant, key=key, request_hash=hashed)
    return job_out(session, settings, old) if old is not None else None


CreateBody = JobCreate | TaggingJobCreate | DocumentJobCreate


@dataclass(frozen=True)
class NewJob:
    """What a create route read from its body: the pipeline and its checked options, how the items are made from the
    tenant's roots, the queue's priority and the folder a document job writes to (unconfined yet)."""

    pipeline: Pipeline
    opts: Any
    items: Callable[[tenants.Roots], Sequence[job_store.NewItem] | ItemStream]
    priority: str
    output_dir: str | None = None


def create_out(
    session: Session,
    settings: Settings,
    principal: Principal,
    *,
    request: Request,
    response: Response,
    body: CreateBody,
    key: str | None,
    read: Callable[[], NewJob],
) -> JobOut | EstimateOut:
    """The one create handler: a request whose Idempotency-Key made a job already is answered with it; otherwise the
    body is read (``read``, only now: a folder is walked once), its items made within the tenant's roots, and the job
    submitted for ``principal``'s tenant (``jobs.submit.create``) and answered with its warnings; with ``dry_run``
    nothing is stored and the answer is its estimate (200, not 201)."""
    hashed = request_hash(request, body)
    if (old := replayed_out(session, settings, key, hashed, principal)) is not None:
        return old
    new = read()
    roots = tenants.roots_of(session, settings, principal.tenant)
    job = JobRequest(
        pipeline=new.pipeline.name,
        options=new.opts.model_dump(),
        items=new.items(roots),
        tenant=principal.tenant,
        idempotency_key=key,
        request_hash=hashed,
        model=body.model,
        priority=new.priority,
        output_dir=output_dir_of(new.output_dir, roots.outputs),
        deadline=body.deadline,
        strict_deadline=body.strict_deadline,
    )
    if body.dry_run:
        response.status_code = 200
        return estimate_out(jobs_dry_run(session, settings, job))
    made = create(session, settings, job)
    out = job_out(session, settings, made.job)
    out.warnings = made.warnings + out.warnings
    return out


def estimate_out(e: Estimate) -> EstimateOut:
    return EstimateOut(
        items=e.items,
        per_item=[ItemTokensOut(**vars(t)) for t in e.per_item],
        visual_tokens=e.visual_tokens,
        text_tokens=e.text_tokens,
        tokens=e.tokens,
        engine_seconds=FigureOut(**vars(e.engine_seconds)),
        wh=FigureOut(**vars(e.wh)),
        cost=FigureOut(**vars(e.cost)),
        expected_finish_at=e.expected_finish,
        warnings=e.warnings,
    )


def images_of(items: list[ItemIn] | None) -> list[tuple[list[str], str | None]] | None:
    return [(it.images, it.ref) for it in items] if items is not None else None


def documents_of(items: list[DocumentIn] | None) -> list[tuple[str, str | None]] | None:
    return [(it.path, it.ref) for it in items] if items is not None else None


def items_of(
    body: JobCreate, pipeline: Pipeline, opts: Any, settings: Settings, roots: tenants.Roots
) -> Sequence[job_store.NewItem] | ItemStream:
    """``POST /v1/jobs``' items, read in the shape of the pipeline's kind (422 ``invalid_items`` when they are not)."""
    try:
        if pipeline.kind == PipelineKind.IMAGE:
            image_in = [ItemIn.model_validate(it) for it in body.items] if body.items is not None else None
            return image_items(
                settings,
                roots=roots.inputs,
                inline=images_of(image_in),
                directory=body.directory,
                recursive=body.recursive,
                images_per_prompt=getattr(opts, "images_per_prompt", 1),
                videos=isinstance(pipeline, ImagePipeline) and pipeline.takes_video,
                s3_prefixes=roots.s3_prefixes,
            )
        doc_in = [DocumentIn.model_validate(it) for it in body.items] if body.items is not None else None
        return document_items(
            settings,
            roots=roots.inputs,
            inline=documents_of(doc_in),
            directory=body.directory,
            recursive=body.recursive,
        )
    except ValidationError as exc:
        raise RequestRefused(INVALID_ITEMS, f"bad items for {pipeline.kind} pipeline '{pipeline.name}': {exc}") from exc

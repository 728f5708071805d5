"""Job routes: create, read, page, stream, cancel, pause, resume, re-run. Adapters: a route parses the request,
calls the jobs service (``jobs.submit``, ``jobs.actions``) or CRUD, and shapes the answer; a refusal is a
``VlbatchError`` that ``api.http_errors`` turns into the HTTP answer."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from functools import partial
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response

from api.deps import PrincipalDep, SessionClosingRoute, SessionDep, SettingsDep
from api.http_errors import RequestRefused, errors
from api.job_requests import (
    NEW_JOB_REFUSALS,
    IdempotencyKey,
    NewJob,
    create_out,
    documents_of,
    images_of,
    items_of,
)
from api.job_views import found_job, job_out
from api.ndjson_jobs import create_from_lines
from api.params import position_cursor
from api.schemas import (
    DocumentJobCreate,
    EstimateOut,
    ItemOut,
    JobCreate,
    JobOut,
    Page,
    RerunRequest,
    TaggingJobCreate,
)
from jobs import actions
from jobs.item_streams import ItemStream
from jobs.new_items import document_items, image_items, options_of, pipeline_of
from pipelines import image_tagging
from pipelines.base import PipelineKind
from vlbatch.db import job_store
from vlbatch.db.job_store import NewItem
from vlbatch.db.tenants import Roots
from vlbatch.errors import (
    ACTIVE_JOBS_QUOTA_EXCEEDED,
    BAD_CURSOR,
    BATCH_OWNED_JOB,
    INVALID_ITEMS,
    INVALID_OPTIONS,
    INVALID_REQUEST,
    ITEM_LINE_TOO_LONG,
    ITEMS_QUOTA_EXCEEDED,
    JOB_NOT_FOUND,
    JOB_STATE_CONFLICT,
    NOTHING_TO_RERUN,
    TOO_MANY_ITEMS,
    UNKNOWN_PIPELINE,
    WRONG_PIPELINE_KIND,
)

router = APIRouter(route_class=SessionClosingRoute, prefix="/v1/jobs", tags=["jobs"])


# A job-creating route answers 201 with the job, or 200 with its estimate when the body asks ``"dry_run": true``.
DRY_RUN: dict[int | str, dict[str, Any]] = {
    200: {"model": EstimateOut, "description": 'A dry run (`"dry_run": true`): the estimate; nothing is stored.'}
}


@router.post(
    "",
    status_code=201,
    responses=DRY_RUN
    | errors(UNKNOWN_PIPELINE, WRONG_PIPELINE_KIND, INVALID_OPTIONS, INVALID_ITEMS, *NEW_JOB_REFUSALS),
)
def create_job(
    body: JobCreate,
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    principal: PrincipalDep,
    response: Response,
    idempotency_key: IdempotencyKey = None,
) -> JobOut | EstimateOut:
    """A job of any registered pipeline (``GET /v1/pipelines`` lists them with their options)."""

    def read() -> NewJob:
        pipeline = pipeline_of(body.pipeline)
        if pipeline.kind == PipelineKind.REQUEST:  # its items are request bodies in an uploaded batch file
            raise RequestRefused(
                WRONG_PIPELINE_KIND,
                f"pipeline '{pipeline.name}' takes OpenAI request bodies: submit them to /v1/batches",
            )
        opts = options_of(pipeline, body.options)
        priority = body.priority or ("documents" if pipeline.kind == PipelineKind.DOCUMENT else "batch")
        items = partial(items_of, body, pipeline, opts, settings)
        return NewJob(pipeline, opts, items, priority, body.output_dir)

    return create_out(
        session, settings, principal, request=request, response=response, body=body, key=idempotency_key, read=read
    )


@router.post("/tagging", status_code=201, responses=DRY_RUN | errors(INVALID_ITEMS, *NEW_JOB_REFUSALS))
def create_tagging_job(
    body: TaggingJobCreate,
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    principal: PrincipalDep,
    response: Response,
    idempotency_key: IdempotencyKey = None,
) -> JobOut | EstimateOut:
    def items(roots: Roots) -> Sequence[NewItem] | ItemStream:
        return image_items(
            settings,
            roots=roots.inputs,
            inline=images_of(body.items),
            directory=body.directory,
            recursive=body.recursive,
            images_per_prompt=body.options.images_per_prompt,
            videos=True,
            s3_prefixes=roots.s3_prefixes,
        )

    def read() -> NewJob:
        return NewJob(pipeline_of(image_tagging.NAME), body.options, items, body.priority)

    return create_out(
        session, settings, principal, request=request, response=response, body=body, key=idempotency_key, read=read
    )


@router.post(
    "/documents",
    status_code=201,
    responses=DRY_RUN | errors(UNKNOWN_PIPELINE, WRONG_PIPELINE_KIND, INVALID_OPTIONS, *NEW_JOB_REFUSALS),
)
def create_document_job(
    body: DocumentJobCreate,
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    principal: PrincipalDep,
    response: Response,
    idempotency_key: IdempotencyKey = None,
) -> JobOut | EstimateOut:
    def items(roots: Roots) -> Sequence[NewItem] | ItemStream:
        inline = documents_of(body.items)
        return document_items(
            settings, roots=roots.inputs, inline=inline, directory=body.directory, recursive=body.recursive
        )

    def read() -> NewJob:
        pipeline = pipeline_of(body.pipeline, PipelineKind.DOCUMENT)
        return NewJob(pipeline, options_of(pipeline, body.options), items, "documents", body.output_dir)

    return create_out(
        session, settings, principal, request=request, response=response, body=body, key=idempotency_key, read=read
    )


@router.post(
    "/ndjson",
    status_code=201,
    responses=errors(
        INVALID_REQUEST,
        UNKNOWN_PIPELINE,
        WRONG_PIPELINE_KIND,
        INVALID_OPTIONS,
        INVALID_ITEMS,
        ITEM_LINE_TOO_LONG,
        *NEW_JOB_REFUSALS,
    ),
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/x-ndjson": {"schema": {"type": "string", "format": "binary"}}},
        }
    },
)
def create_ndjson_job(
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    principal: PrincipalDep,
    idempotency_key: IdempotencyKey = None,
) -> JobOut:
    """A job from an NDJSON upload: line 1 the job's head (the fields of `POST /v1/jobs` but `items`,
    `directory`, `recursive` and `dry_run`), then one item a line, streamed in and stored as read; the answer comes
    once the job is stored. A bad line refuses the job with its line number, nothing stored (docs/large-jobs.md)."""
    return create_from_lines(session, settings, principal, request=request, key=idempotency_key)


@router.post(
    "/{job_id}/rerun",
    status_code=201,
    responses=errors(
        JOB_NOT_FOUND,
        BATCH_OWNED_JOB,
        NOTHING_TO_RERUN,
        TOO_MANY_ITEMS,
        ITEMS_QUOTA_EXCEEDED,
        ACTIVE_JOBS_QUOTA_EXCEEDED,
    ),
)
def rerun_job(
    job_id: str, body: RerunRequest, session: SessionDep, settings: SettingsDep, principal: PrincipalDep
) -> JobOut:
    """A new job over the same inputs: all of them, only those that did not succeed ('missing'), or those whose
    processed-with marker differs from now ('refresh'); it belongs to the old job's tenant and counts against
    that tenant's quotas."""
    old = found_job(session, job_id, principal)
    new = actions.rerun(session, settings, old, scope=body.scope, model_revision=body.model_revision)
    return job_out(session, settings, new)


@router.get("", responses=errors(BAD_CURSOR))
def list_jobs(
    session: SessionDep,
    settings: SettingsDep,
    principal: PrincipalDep,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    cursor: Annotated[str | None, Query(max_length=200, description="next_cursor of the previous page.")] = None,
    status: Annotated[str | None, Query(max_length=16, description="Only jobs in this state.")] = None,
) -> Page[JobOut]:
    """The principal's jobs (an admin's: every tenant's), newest first, in keyset pages."""
    jobs = job_store.list_jobs(session, tenant=principal.scope, limit=limit, before=_job_cursor(cursor), status=status)
    last = jobs[-1] if len(jobs) == limit else None
    next_cursor = f"{last.created_at.isoformat()}|{last.id}" if last is not None else None
    return Page[JobOut](data=[job_out(session, settings, j) for j in jobs], next_cursor=next_cursor)


def _job_cursor(cursor: str | None) -> tuple[datetime, str] | None:
    if cursor is None:
        return None
    at, _, job_id = cursor.partition("|")
    try:
        return datetime.fromisoformat(at), job_id
    except ValueError as exc:
        raise RequestRefused(BAD_CURSOR, f"bad cursor '{cursor[:80]}'") from exc


@router.get("/{job_id}", responses=errors(JOB_NOT_FOUND))
def read_job(job_id: str, session: SessionDep, principal: PrincipalDep, settings: SettingsDep) -> JobOut:
    return job_out(
        session, settings, found_job(session, job_id, principal), price_per_kwh=settings.telemetry.price_per_kwh
    )


@router.post("/{job_id}/cancel", responses=errors(JOB_NOT_FOUND, BATCH_OWNED_JOB, JOB_STATE_CONFLICT))
def cancel_job(job_id: str, session: SessionDep, settings: SettingsDep, principal: PrincipalDep) -> JobOut:
    """Cancel a queued, running or paused job. A finished or cancelled one is refused (409) and left as it is."""
    return job_out(session, settings, actions.cancel(session, found_job(session, job_id, principal)))


@router.post("/{job_id}/pause", responses=errors(JOB_NOT_FOUND, BATCH_OWNED_JOB, JOB_STATE_CONFLICT))
def pause_job(job_id: str, session: SessionDep, settings: SettingsDep, principal: PrincipalDep) -> JobOut:
    """Stop claiming the job's chunks; items workers already hold finish. Resume with /resume."""
    return job_out(session, settings, actions.pause(session, found_job(session, job_id, principal)))


@router.post("/{job_id}/resume", responses=errors(JOB_NOT_FOUND, BATCH_OWNED_JOB, JOB_STATE_CONFLICT))
def resume_job(job_id: str, session: SessionDep, principal: PrincipalDep, settings: SettingsDep) -> JobOut:
    """Resume a paused job: its unfinished chunks are sent to the queue again."""
    return job_out(session, settings, actions.resume(session, settings, found_job(session, job_id, principal)))


@router.get("/{job_id}/items", responses=errors(JOB_NOT_FOUND, BAD_CURSOR))
def list_items(
    job_id: str,
    session: SessionDep,
    principal: PrincipalDep,
    cursor: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    status: str | None = None,
) -> Page[ItemOut]:
    found_job(session, job_id, principal)
    rows = job_store.list_items(session, job_id=job_id, after_seq=position_cursor(cursor), limit=limit, status=status)
    data = [ItemOut.model_validate(r, from_attributes=True) for r in rows]
    return Page[ItemOut](data=data, next_cursor=str(rows[-1].seq) if len(rows) == limit else None)

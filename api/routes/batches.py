"""OpenAI-compatible Batches API: create, retrieve, list (``after``, ``limit``), cancel. Thin: the work is the jobs
service's ``jobs.batches`` (checking lines into a job, moving a batch on) over ``vlbatch.db.batches``; the answer is
shaped by ``api.batch_views``."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from api.batch_views import batch_out
from api.deps import PrincipalDep, SessionClosingRoute, SessionDep, SettingsDep
from api.http_errors import errors
from api.job_requests import estimate_out
from api.openai_schemas import BatchCreate, BatchList, BatchObject
from api.schemas import EstimateOut
from jobs import batches as batch_jobs
from vlbatch.db import batches, retention
from vlbatch.errors import (
    ACTIVE_JOBS_QUOTA_EXCEEDED,
    BATCH_FINISHED,
    BATCH_NOT_FOUND,
    DRY_RUN_BUSY,
    FILE_CONTENT_MISSING,
    FILE_NOT_FOUND,
    INVALID_BATCH,
    INVALID_EXPIRY,
    ITEMS_QUOTA_EXCEEDED,
    NO_MODEL,
    TOO_MANY_BATCH_LINES,
    TOO_MANY_ITEMS,
)

router = APIRouter(route_class=SessionClosingRoute, prefix="/v1/batches", tags=["batches"])


@router.post(
    "",
    responses=errors(
        FILE_NOT_FOUND,
        FILE_CONTENT_MISSING,
        INVALID_BATCH,
        INVALID_EXPIRY,
        NO_MODEL,
        TOO_MANY_BATCH_LINES,
        TOO_MANY_ITEMS,
        ITEMS_QUOTA_EXCEEDED,
        ACTIVE_JOBS_QUOTA_EXCEEDED,
        DRY_RUN_BUSY,
    ),
)
def create_batch(
    body: BatchCreate, session: SessionDep, settings: SettingsDep, principal: PrincipalDep
) -> BatchObject | EstimateOut:
    new = batch_jobs.NewBatch(
        input_file_id=body.input_file_id,
        endpoint=body.endpoint,
        completion_window=body.completion_window,
        metadata=body.metadata,
        options=body.options,
        output_expires_after=body.output_expires_after,
    )
    if body.dry_run:
        return estimate_out(
            batch_jobs.estimate(session, settings, tenant=principal.tenant, scope=principal.scope, new=new)
        )
    batch = batch_jobs.create(session, settings, tenant=principal.tenant, scope=principal.scope, new=new)
    return batch_out(session, batch, retention.policy(session, settings))


@router.get("/{batch_id}", responses=errors(BATCH_NOT_FOUND))
def retrieve_batch(batch_id: str, session: SessionDep, settings: SettingsDep, principal: PrincipalDep) -> BatchObject:
    batch = batch_jobs.found_batch(session, scope=principal.scope, batch_id=batch_id)
    return batch_out(session, batch_jobs.refresh(session, settings, batch), retention.policy(session, settings))


@router.get("")
def list_batches(
    session: SessionDep,
    settings: SettingsDep,
    principal: PrincipalDep,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    after: str | None = None,
) -> BatchList:
    rows = batches.list_batches(session, scope=principal.scope, limit=limit + 1, after=after)
    rules = retention.policy(session, settings)
    data = [batch_out(session, batch_jobs.refresh(session, settings, b), rules) for b in rows[:limit]]
    return BatchList(
        data=data,
        first_id=data[0].id if data else None,
        last_id=data[-1].id if data else None,
        has_more=len(rows) > limit,
    )


@router.post("/{batch_id}/cancel", responses=errors(BATCH_NOT_FOUND, BATCH_FINISHED))
def cancel_batch(batch_id: str, session: SessionDep, settings: SettingsDep, principal: PrincipalDep) -> BatchObject:
    batch = batch_jobs.found_batch(session, scope=principal.scope, batch_id=batch_id)
    return batch_out(session, batch_jobs.cancel(session, batch), retention.policy(session, settings))

"""How the Files and Batches routes show a batch: the ``Batch`` row (``jobs.batches``) as OpenAI's batch object,
its line counts and, once it has ended, its token usage; times as seconds since 1970."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy.orm import Session

from api.openai_schemas import BatchError, BatchErrors, BatchObject, BatchUsage, ExpiresAfter, RequestCounts
from vlbatch.db import batches, retention
from vlbatch.db.models import Batch, Job


def epoch(value: datetime | None) -> int | None:
    if value is None:
        return None
    return int((value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp())  # SQLite gives naive UTC


def batch_out(session: Session, batch: Batch, rules: retention.Policy) -> BatchObject:
    """``rules``: the retention that says when an ended batch's job (its results, and the batch) is deleted."""
    ts = epoch
    errors = None
    if batch.errors:
        errors = BatchErrors(data=[BatchError.model_validate(e) for e in batch.errors])
    usage = None
    if batch.status in batches.DONE_STATES:
        usage = BatchUsage(
            input_tokens=batch.prompt_tokens,
            output_tokens=batch.completion_tokens,
            total_tokens=batch.prompt_tokens + batch.completion_tokens,
        )
    return BatchObject(
        id=batch.id,
        endpoint=batch.endpoint,
        model=batch.model,
        errors=errors,
        input_file_id=batch.input_file_id,
        completion_window=batch.completion_window,
        status=batch.status,
        output_file_id=batch.output_file_id,
        error_file_id=batch.error_file_id,
        created_at=ts(batch.created_at) or 0,
        in_progress_at=ts(batch.in_progress_at),
        expires_at=ts(batch.expires_at),
        finalizing_at=ts(batch.finalizing_at),
        completed_at=ts(batch.completed_at),
        failed_at=ts(batch.failed_at),
        expired_at=ts(batch.expired_at),
        cancelling_at=ts(batch.cancelling_at),
        cancelled_at=ts(batch.cancelled_at),
        request_counts=RequestCounts(**batches.request_counts(session, batch=batch)),
        usage=usage,
        metadata=batch.meta,
        output_expires_after=(
            ExpiresAfter(seconds=batch.output_expires_after_s) if batch.output_expires_after_s is not None else None
        ),
        output_expires_at=ts(_output_expires_at(session, batch, rules)),
    )


def _output_expires_at(session: Session, batch: Batch, rules: retention.Policy) -> datetime | None:
    if batch.status not in batches.DONE_STATES or batch.job_id is None:
        return None  # its job is kept while the batch runs (vlbatch.db.retention)
    job = session.get(Job, batch.job_id)
    return retention.job_expires_at(job, rules) if job is not None else None

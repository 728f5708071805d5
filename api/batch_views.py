"""How the Files and Batches routes show a batch: the ``Batch`` row (``jobs.batches``) as OpenAI's batch object,
its line counts and, once it has ended, its token usage; times as seconds since 1970."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy.orm import Session

from api.openai_schemas import BatchError, BatchErrors, BatchObject, BatchUsage, RequestCounts
from vlbatch.db import batches
from vlbatch.db.models import Batch


def epoch(value: datetime | None) -> int | None:
    if value is None:
        return None
    return int((value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp())  # SQLite gives naive UTC


def batch_out(session: Session, batch: Batch) -> BatchObject:
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
    )

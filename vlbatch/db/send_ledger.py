"""The send ledger: which chunks are marked sent to the broker, and which are due to be sent again.

Chunks are marked sent in the commit before their message leaves (``jobs.publisher.send_chunks``), so a
reconciler pass never counts a chunk being published as lost. Keyword-only arguments; no HTTP errors."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from sqlalchemy import case, func, or_, select, update
from sqlalchemy.orm import Session

from vlbatch.db.bulk import ID_BATCH
from vlbatch.db.models import (
    Chunk,
    Job,
    JobStatus,
    utcnow,
)
from vlbatch.db.queues import queue_paused

# A chunk sent and never claimed waits stale_after, then twice that, ... up to this many times stale_after.
MAX_RESEND_BACKOFF = 32


def resend_wait(stale_after: timedelta, sends: int) -> timedelta:
    """How long a chunk sent ``sends`` times and never claimed waits before it is sent again."""
    return stale_after * min(2 ** max(sends - 1, 0), MAX_RESEND_BACKOFF)


def chunks_to_enqueue(
    session: Session, *, now: datetime, stale_after: timedelta, limit: int, after_id: int = 0
) -> list[Chunk]:
    """Chunks the queue may have lost: never sent, sent and unclaimed for longer than their back-off
    (``resend_wait``), or with an expired lease. One page of ``limit`` candidates by id after ``after_id``;
    the page may hold fewer (those still backing off are left out), so callers page on the last id read."""
    stmt = (
        select(Chunk)
        .join(Job, Job.id == Chunk.job_id)
        .where(Chunk.id > after_id, Chunk.done.is_(False), Job.status.in_([JobStatus.QUEUED, JobStatus.RUNNING]))
        .where(~queue_paused())  # resume_queue hands them back
        .where(
            or_(
                Chunk.enqueued_at.is_(None),
                (Chunk.lease_owner.is_(None) & (Chunk.enqueued_at < now - stale_after)),
                Chunk.lease_expires_at < now,
            )
        )
        .order_by(Chunk.id)
        .limit(limit)
    )
    return list(session.scalars(stmt))


def due_for_send(chunk: Chunk, *, now: datetime, stale_after: timedelta) -> bool:
    """Whether a candidate of ``chunks_to_enqueue`` is due now: an unclaimed chunk backs off per send."""
    if chunk.enqueued_at is None or chunk.lease_owner is not None:
        return True  # never sent, or its lease expired (the holder is gone)
    sent = chunk.enqueued_at if chunk.enqueued_at.tzinfo else chunk.enqueued_at.replace(tzinfo=now.tzinfo)
    return sent < now - resend_wait(stale_after, chunk.sends)


def unclaimed_by_model(session: Session, *, min_sends: int) -> dict[str, int]:
    """Chunks of active jobs sent ``min_sends`` times or more and never claimed, per model: work no worker takes."""
    stmt = (
        select(Job.model, func.count())
        .join(Chunk, Chunk.job_id == Job.id)
        .where(Job.status.in_([JobStatus.QUEUED, JobStatus.RUNNING]), Chunk.done.is_(False))
        .where(Chunk.lease_owner.is_(None), Chunk.sends >= min_sends, ~queue_paused())
        .group_by(Job.model)
    )
    return {model: int(n) for model, n in session.execute(stmt).all()}


def mark_enqueued(session: Session, *, chunk_ids: Sequence[int]) -> None:
    now = utcnow()
    for start in range(0, len(chunk_ids), ID_BATCH):
        ids = list(chunk_ids[start : start + ID_BATCH])
        session.execute(update(Chunk).where(Chunk.id.in_(ids)).values(enqueued_at=now, sends=Chunk.sends + 1))


def mark_unsent(session: Session, *, chunk_ids: Sequence[int]) -> None:
    """Undo ``mark_enqueued`` for chunks the broker did not take: the reconciler's next pass sends them."""
    for start in range(0, len(chunk_ids), ID_BATCH):
        ids = list(chunk_ids[start : start + ID_BATCH])
        sends = case((Chunk.sends > 0, Chunk.sends - 1), else_=0)
        session.execute(update(Chunk).where(Chunk.id.in_(ids)).values(enqueued_at=None, sends=sends))

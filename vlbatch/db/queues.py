"""Pausing a queue (a model and priority): claims of every job's chunks on it stop, held chunks finish, and
resuming hands back the chunks to send again. ``leases.claim_chunk`` and the reconciler's ``chunks_to_enqueue``
test ``queue_paused``. Keyword-only arguments; no HTTP errors."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import Exists, delete, func, or_, select, update
from sqlalchemy.orm import Session

from vlbatch.db.models import Chunk, EngineSample, Job, JobStatus, PausedQueue, utcnow

__all__ = ["QueueState", "ended_queues", "list_queues", "pause_queue", "queue_paused", "resume_queue"]


def queue_paused() -> Exists:
    """SQL: the job's queue (its model and priority) is paused, for a WHERE over ``Job`` (correlated)."""
    return (
        select(PausedQueue.model).where(PausedQueue.model == Job.model, PausedQueue.priority == Job.priority).exists()
    )


def pause_queue(session: Session, *, model: str, priority: str, by: str) -> bool:
    """Pause the queue; False when it was paused already."""
    if session.get(PausedQueue, (model, priority)) is not None:
        return False
    session.add(PausedQueue(model=model, priority=priority, paused_by=by, paused_at=utcnow()))
    session.flush()  # a concurrent pause of the same queue fails here on the primary key
    return True


def resume_queue(session: Session, *, model: str, priority: str) -> list[int] | None:
    """Resume the queue. Returns the ids of the chunks to send again: not done, not held under a live lease, of
    queued or running jobs on it (a job paused on its own stays paused; their messages were dropped while the
    queue was paused). None when the queue was not paused."""
    res = session.execute(delete(PausedQueue).where(PausedQueue.model == model, PausedQueue.priority == priority))
    if not res.rowcount:  # type: ignore[attr-defined]
        return None
    now = utcnow()
    ids = list(
        session.scalars(
            select(Chunk.id)
            .join(Job, Job.id == Chunk.job_id)
            .where(Job.model == model, Job.priority == priority)
            .where(Job.status.in_([JobStatus.QUEUED, JobStatus.RUNNING]), Chunk.done.is_(False))
            .where(or_(Chunk.lease_owner.is_(None), Chunk.lease_expires_at < now))
            .order_by(Chunk.id)
        )
    )
    for start in range(0, len(ids), 1000):  # not enqueued: should the publish fail, the reconciler sends them
        session.execute(update(Chunk).where(Chunk.id.in_(ids[start : start + 1000])).values(enqueued_at=None))
    return ids


@dataclass(frozen=True)
class QueueState:
    model: str
    priority: str
    paused: bool
    paused_by: str | None
    paused_at: datetime | None
    active_jobs: int


def _aware(at: datetime) -> datetime:
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)  # SQLite hands back naive UTC


def list_queues(session: Session) -> list[QueueState]:
    """The queues with unfinished jobs (queued, running or paused) and the paused ones, by model and priority."""
    stmt = (
        select(Job.model, Job.priority, func.count())
        .where(Job.status.in_([JobStatus.QUEUED, JobStatus.RUNNING, JobStatus.PAUSED]))
        .group_by(Job.model, Job.priority)
    )
    active = {(model, priority): int(n) for model, priority, n in session.execute(stmt).tuples()}
    paused = {(q.model, q.priority): q for q in session.scalars(select(PausedQueue))}
    return [
        QueueState(
            model=model,
            priority=priority,
            paused=(model, priority) in paused,
            paused_by=paused[model, priority].paused_by if (model, priority) in paused else None,
            paused_at=_aware(paused[model, priority].paused_at) if (model, priority) in paused else None,
            active_jobs=active.get((model, priority), 0),
        )
        for model, priority in sorted(active.keys() | paused.keys())
    ]


def served_models(session: Session, *, since: datetime) -> list[str]:
    """The models whose workers stored an engine sample (their heartbeat) since ``since``, sorted; [] when no worker
    at all did (none is running yet, or sampling is off): then nothing can be said of a model missing."""
    found = select(EngineSample.model).where(EngineSample.sampled_at >= since).distinct()
    return sorted(m for m in session.scalars(found) if m)


def ended_queues(session: Session, *, since: datetime, limit: int = 1000) -> list[tuple[str, str]]:
    """The queues (model, priority) whose jobs have all ended, the last of them since ``since``: nothing needs
    their broker keys any more. Only queues this database had jobs on: a broker shared with another deployment
    keeps that one's queues."""
    ended = select(Job.model, Job.priority).where(Job.finished_at >= since)
    live = select(Job.model, Job.priority).where(
        Job.status.in_([JobStatus.QUEUED, JobStatus.RUNNING, JobStatus.PAUSED])
    )
    return [(m, p) for m, p in session.execute(ended.except_(live).limit(limit))]

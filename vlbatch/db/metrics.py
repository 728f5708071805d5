"""The reads behind ``GET /metrics`` (``api/prometheus.py``): the newest sample per worker and chip, the items of
unfinished jobs by queue and state, the paused queues and the unfinished jobs with a deadline. Keyword-only
arguments; no HTTP errors."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from vlbatch.db.job_store import ACTIVE_JOB_STATES
from vlbatch.db.models import DeviceSample, EngineSample, Item, Job, PausedQueue

__all__ = [
    "item_counts",
    "jobs_with_deadline",
    "newest_device_samples",
    "newest_engine_samples",
    "paused_queues",
]


def newest_device_samples(session: Session, *, since: datetime) -> Sequence[DeviceSample]:
    """Each (worker, chip)'s newest sample stored since ``since``: a stopped worker drops out."""
    newest = (
        select(func.max(DeviceSample.id))
        .where(DeviceSample.sampled_at >= since)
        .group_by(DeviceSample.worker, DeviceSample.device_id)
    )
    return session.scalars(
        select(DeviceSample).where(DeviceSample.id.in_(newest)).order_by(DeviceSample.worker, DeviceSample.device_id)
    ).all()


def newest_engine_samples(session: Session, *, since: datetime) -> Sequence[EngineSample]:
    """Each worker's newest engine sample stored since ``since``."""
    newest = select(func.max(EngineSample.id)).where(EngineSample.sampled_at >= since).group_by(EngineSample.worker)
    return session.scalars(select(EngineSample).where(EngineSample.id.in_(newest)).order_by(EngineSample.worker)).all()


def item_counts(session: Session) -> list[tuple[str, str, str, int]]:
    """(model, priority, item status, count) over the items of unfinished jobs (index-only on
    ``ix_items_job_status``)."""
    stmt = (
        select(Job.model, Job.priority, Item.status, func.count())
        .join(Item, Item.job_id == Job.id)
        .where(Job.status.in_(ACTIVE_JOB_STATES))
        .group_by(Job.model, Job.priority, Item.status)
    )
    return [(model, priority, status, int(n)) for model, priority, status, n in session.execute(stmt)]


def paused_queues(session: Session) -> list[tuple[str, str]]:
    """(model, priority) of every paused queue."""
    return [(m, p) for m, p in session.execute(select(PausedQueue.model, PausedQueue.priority))]


def jobs_with_deadline(session: Session) -> Sequence[Job]:
    """Unfinished jobs that carry a deadline."""
    return session.scalars(select(Job).where(Job.status.in_(ACTIVE_JOB_STATES), Job.deadline.is_not(None))).all()

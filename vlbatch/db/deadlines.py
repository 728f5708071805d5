"""A job's deadline verdict: ``on_track``, ``at_risk`` or ``late``, from its queue's live rate and what is ahead.

Claims share the queue between tenants by weight and go earliest deadline first within a tenant
(``claim_order``), so what runs before a job's last item is its own open items and those of its tenant's jobs of
the queue with an earlier deadline, at the tenant's part of the queue's rate: its weight over the weights of the
tenants with open work on the queue (``VLBATCH_TENANT_SHARES``, 1 each by default). The queue's live rate is its
items finished over the last ``RATE_WINDOW`` (or since its first job started, when that is shorter). The expected
finish is now plus what is ahead over the tenant's part of that rate:

- ``late``: the deadline has passed with items open, or the job finished after it;
- ``at_risk``: the expected finish uses more than ``AT_RISK_MARGIN`` of the time left (or the queue has started and
  finishes nothing: no rate can meet a deadline);
- ``on_track``: otherwise, and while no job of the queue has started yet (no rate to judge by).

Keyword-only arguments; no HTTP errors.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import Select, func, select
from sqlalchemy.orm import Session

from vlbatch.db.models import Item, ItemStatus, Job, JobStatus

RATE_WINDOW = timedelta(minutes=10)
# Expected to finish in more than this part of the time left: at risk (a tenth is kept for the estimate's error).
AT_RISK_MARGIN = 0.9
_OPEN = [ItemStatus.QUEUED, ItemStatus.RUNNING]
_ACTIVE = [JobStatus.QUEUED, JobStatus.RUNNING, JobStatus.PAUSED]


class DeadlineStatus(enum.StrEnum):
    ON_TRACK = "on_track"
    AT_RISK = "at_risk"
    LATE = "late"


@dataclass(frozen=True)
class DeadlineView:
    status: DeadlineStatus
    expected_finish: datetime | None  # None: finished, or no rate yet
    items_ahead: int  # open items of the tenant's jobs of the queue due earlier, this job's own included
    items_per_second: float | None  # the tenant's part of the queue's live rate


def _aware(at: datetime) -> datetime:
    return at if at.tzinfo else at.replace(tzinfo=UTC)


def _queue_items(model: str, priority: str) -> Select[int]:
    """How many items the jobs of one queue (model, priority) hold; the caller narrows it."""
    return (
        select(func.count())
        .select_from(Item)
        .join(Job, Job.id == Item.job_id)
        .where(Job.model == model, Job.priority == priority)
    )


def queue_rate(session: Session, *, model: str, priority: str, now: datetime) -> float | None:
    """Items of the queue finished per second over the last ``RATE_WINDOW`` (or since its first active job
    started); None when none of its jobs has started."""
    first_start = session.scalar(
        select(func.min(Job.started_at)).where(
            Job.model == model, Job.priority == priority, Job.started_at.is_not(None), Job.finished_at.is_(None)
        )
    )
    since = now - RATE_WINDOW
    if first_start is None:
        return None
    since = max(since, _aware(first_start))
    done = session.scalar(
        _queue_items(model, priority).where(
            Item.status.in_([ItemStatus.SUCCEEDED, ItemStatus.FAILED]), Item.updated_at >= since, Item.updated_at <= now
        )
    )
    return (done or 0) / max((now - since).total_seconds(), 1.0)


def tenant_part(session: Session, job: Job, *, weights: Mapping[str, float]) -> float:
    """The job's tenant's part of its queue's claims: its weight over those of the tenants with open work there."""
    tenants = set(
        session.scalars(
            select(Job.tenant)
            .distinct()
            .join(Item, Item.job_id == Job.id)
            .where(
                Job.model == job.model,
                Job.priority == job.priority,
                Job.status.in_(_ACTIVE),
                Item.status.in_(_OPEN),
            )
        )
    ) | {job.tenant}
    weight = {t: max(weights.get(t, 1.0), 1e-6) for t in tenants}
    return weight[job.tenant] / sum(weight.values())


def deadline_view(
    session: Session,
    job: Job,
    *,
    now: datetime,
    margin: float = AT_RISK_MARGIN,
    weights: Mapping[str, float] | None = None,
) -> DeadlineView | None:
    """The job's verdict (see the module); None for a job without a deadline, or cancelled. ``weights``: the
    tenants' ``VLBATCH_TENANT_SHARES`` (1 each when not given)."""
    if job.deadline is None or job.status == JobStatus.CANCELLED:
        return None
    deadline = _aware(job.deadline)
    if job.finished_at is not None:
        late = _aware(job.finished_at) > deadline
        return DeadlineView(DeadlineStatus.LATE if late else DeadlineStatus.ON_TRACK, None, 0, None)
    ahead = int(
        session.scalar(
            select(func.count())
            .select_from(Item)
            .join(Job, Job.id == Item.job_id)
            .where(
                Job.model == job.model,
                Job.priority == job.priority,
                Job.tenant == job.tenant,
                Job.status.in_(_ACTIVE),
                Job.deadline.is_not(None),
                Job.deadline <= deadline,
                Item.status.in_(_OPEN),
            )
        )
        or 0
    )
    rate = queue_rate(session, model=job.model, priority=job.priority, now=now)
    if rate:
        rate *= tenant_part(session, job, weights=weights or {})
    expected = None if not rate else now + timedelta(seconds=ahead / rate)
    if now > deadline:
        status = DeadlineStatus.LATE
    elif rate is None:
        status = DeadlineStatus.ON_TRACK
    elif expected is None or expected > now + (deadline - now) * margin:
        status = DeadlineStatus.AT_RISK
    else:
        status = DeadlineStatus.ON_TRACK
    return DeadlineView(status, expected, ahead, rate)


def items_ahead(session: Session, *, model: str, priority: str, deadline: datetime | None) -> int:
    """Open items of the queue's jobs claimed before a new job with ``deadline`` (earlier deadlines; every job with
    a deadline when it has none)."""
    stmt = _queue_items(model, priority).where(
        Job.status.in_([JobStatus.QUEUED, JobStatus.RUNNING]),
        Job.deadline.is_not(None),
        Item.status.in_([ItemStatus.QUEUED, ItemStatus.RUNNING]),
    )
    if deadline is not None:
        stmt = stmt.where(Job.deadline <= deadline)
    return int(session.scalar(stmt) or 0)

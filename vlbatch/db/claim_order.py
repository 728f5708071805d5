"""The order of claims within a queue: fair shares between tenants, then earliest deadline first within a tenant.

The broker hands messages out in the order they were sent, so a job's chunks sent first would all run first: a
1,000-item job submitted after a 5M-item one would wait for all of it. The order therefore comes from the
database. A delivered message is a turn to claim one chunk of its queue (a model and priority), and the turn
goes to the best chunk of the queue that is free, which is often the delivered one:

1. the tenant with the smallest weighted share of the queue's recent claims first: its claims within
   ``VLBATCH_FAIR_SHARE_WINDOW_S`` over its ``VLBATCH_TENANT_SHARES`` weight, counted over every job of the queue
   it had, finished ones included (a tenant that sends many one-chunk jobs is not new at each of them);
2. within a tenant, its jobs with a ``deadline`` earliest first, then its jobs without one, the job with the
   fewest recent claims first, so a small job starts at the next claim of its tenant;
3. ties go to the earlier deadline (tenants with even shares: the one due first), the older job, and within a
   job to the lowest chunk.

A deadline therefore orders a tenant's own work and never takes another tenant's share: an early (or far past)
deadline gains its tenant nothing against others.

The chosen chunk is leased with the usual compare-and-set, only if it is free (a chunk this worker already
holds is never taken twice). The delivered chunk, when it is not the chosen one, keeps its place in the
database: a later message of the queue claims it, or the reconciler sends it again. So there is still one
claim per message, and no chunk depends on its own message (invariant 1). Keyword-only arguments; no HTTP
errors.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from vlbatch.db import leases
from vlbatch.db.models import Chunk, Item, Job, JobStatus, utcnow
from vlbatch.db.queues import queue_paused

# Free chunks of one job tried before the next job: others may win the same chunks meanwhile.
TRIES_PER_JOB = 4
_NEVER = datetime.max.replace(tzinfo=UTC)


@dataclass(frozen=True)
class Shares:
    """Each tenant's weight (default 1) and how far back recent claims count."""

    weights: Mapping[str, float] = field(default_factory=dict)
    window: timedelta = timedelta(minutes=10)

    def weight(self, tenant: str) -> float:
        return max(self.weights.get(tenant, 1.0), 1e-6)


def _aware(at: datetime | None) -> datetime | None:
    """SQLite hands back naive datetimes for timezone-aware columns; they were stored as UTC."""
    return at.replace(tzinfo=UTC) if at is not None and at.tzinfo is None else at


def tenant_claims(session: Session, *, model: str, priority: str, since: datetime, tenants: list[str]) -> Counter[str]:
    """Each tenant's claims on the queue since ``since``, over all its jobs of the queue, finished ones too (a job
    finished before ``since`` has none and is not read)."""
    rows = session.execute(
        select(Job.tenant, func.count())
        .select_from(Chunk)
        .join(Job, Job.id == Chunk.job_id)
        .where(
            Job.model == model,
            Job.priority == priority,
            Job.tenant.in_(tenants),
            or_(Job.finished_at.is_(None), Job.finished_at >= since),
            Chunk.claimed_at >= since,
        )
        .group_by(Job.tenant)
    ).all()
    return Counter({tenant: int(n) for tenant, n in rows})


def ranked_jobs(session: Session, *, model: str, priority: str, now: datetime, shares: Shares) -> list[str]:
    """The queue's active jobs (queued or running), best first (see the module)."""
    jobs = session.execute(
        select(Job.id, Job.tenant, Job.deadline, Job.created_at).where(
            Job.model == model, Job.priority == priority, Job.status.in_([JobStatus.QUEUED, JobStatus.RUNNING])
        )
    ).all()
    if not jobs:
        return []
    since = now - shares.window
    recent: dict[str, int] = {
        job_id: int(n)
        for job_id, n in session.execute(
            select(Chunk.job_id, func.count())
            .where(Chunk.job_id.in_([j.id for j in jobs]), Chunk.claimed_at >= since)
            .group_by(Chunk.job_id)
        ).all()
    }
    by_tenant = tenant_claims(
        session, model=model, priority=priority, since=since, tenants=sorted({j.tenant for j in jobs})
    )

    def key(j: Any) -> tuple[Any, ...]:
        deadline = _aware(j.deadline)
        return (
            by_tenant[j.tenant] / shares.weight(j.tenant),
            deadline is None,
            deadline or _NEVER,
            recent.get(j.id, 0),
            _aware(j.created_at) or _NEVER,
            j.id,
        )

    return [j.id for j in sorted(jobs, key=key)]


def _free_chunks(session: Session, *, job_id: str, now: datetime, limit: int) -> list[int]:
    return list(
        session.scalars(
            select(Chunk.id)
            .where(
                Chunk.job_id == job_id,
                Chunk.done.is_(False),
                or_(Chunk.lease_owner.is_(None), Chunk.lease_expires_at < now),
            )
            .order_by(Chunk.seq)
            .limit(limit)
        )
    )


class Rankings:
    """A worker's recent rankings per queue, reused for ``ttl_s`` (monotonic seconds): a claim then costs no
    ranking queries, and the order lags the queue's by at most that long (a new job is seen a second later; fair
    shares are kept over a window of minutes)."""

    def __init__(self, ttl_s: float = 1.0) -> None:
        self.ttl_s = ttl_s
        self._ranked: dict[tuple[str, str], tuple[float, list[str]]] = {}

    def ranked(self, session: Session, *, model: str, priority: str, now: datetime, shares: Shares) -> list[str]:
        at = time.monotonic()
        hit = self._ranked.get((model, priority))
        if hit is not None and at - hit[0] < self.ttl_s:
            return hit[1]
        jobs = ranked_jobs(session, model=model, priority=priority, now=now, shares=shares)
        self._ranked[(model, priority)] = (at, jobs)
        return jobs


def claim_next(
    session: Session,
    *,
    delivered: int,
    owner: str,
    lease: timedelta,
    shares: Shares,
    now: datetime | None = None,
    model: str | None = None,
    rankings: Rankings | None = None,
) -> tuple[int | None, list[Item]]:
    """Claim the best free chunk of the delivered chunk's queue. Returns the chunk leased to ``owner`` (None when
    none was: the queue is paused or has nothing free, or, given ``model``, the model the caller serves, the
    delivered chunk is another model's) and its unfinished items ([] for a leased chunk whose items are all
    finished: a worker died after its last write, and the caller finishes it). ``rankings``: a worker's cache of
    the queue's order (None: ranked afresh for this claim)."""
    now = now or utcnow()
    found = session.execute(
        select(Chunk.job_id, Chunk.lease_owner, Chunk.done, Job.model, Job.priority, queue_paused())
        .join(Job, Job.id == Chunk.job_id)
        .where(Chunk.id == delivered)
    ).one_or_none()
    if found is None:
        return None, []
    delivered_job, holder, done, queue_model, priority, paused = found
    if holder == owner and not done:  # a redelivery of a chunk this worker holds
        return delivered, leases.claim_chunk(session, chunk_id=delivered, owner=owner, lease=lease, model=model)
    if paused or (model is not None and queue_model != model):
        return None, []
    rank = rankings.ranked if rankings is not None else ranked_jobs
    for job_id in rank(session, model=queue_model, priority=priority, now=now, shares=shares):
        # The delivered chunk first, when its job is the one due: most claims then cost one lease, no search.
        if job_id == delivered_job and _lease(session, delivered, owner=owner, lease=lease, now=now):
            return delivered, leases.take_items(session, chunk_id=delivered, now=now)
        for cid in _free_chunks(session, job_id=job_id, now=now, limit=TRIES_PER_JOB):
            if cid != delivered and _lease(session, cid, owner=owner, lease=lease, now=now):
                return cid, leases.take_items(session, chunk_id=cid, now=now)
    return None, []


def _lease(session: Session, chunk_id: int, *, owner: str, lease: timedelta, now: datetime) -> bool:
    return leases.lease_chunk(session, chunk_id=chunk_id, owner=owner, lease=lease, now=now, free_only=True)

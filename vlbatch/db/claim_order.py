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

A claim's cost does not grow with the queue. Recent claims are counters, per tenant and per job of the queue in
ten-second buckets, bumped by each claim (``claim_counts``), so a share is a sum over tenants and buckets. The
order is walked lazily (``walk``) and stops at the first job with a chunk to lease: the tenants with active jobs
(one index seek each, on a partial index of active jobs), each tenant's first unclaimed job of each class (one
statement for all), the jobs claimed within the window (from the counters), then further pages of a tenant's own
jobs only when the walk gets past its first. ``ranked_jobs`` is the same order for the whole queue, for views.
Claims outside queue order (``leases.claim_chunk``: the embedded runner) are not counted. On PostgreSQL a claim is
one statement (``claim_statement``) that finds the walk's first job, leases it and counts the claim; the steps
below run there only when it leased nothing, to tell why (a redelivery, a paused queue, another model's chunk) or to
walk on past a best job whose free chunks others were claiming.

The chosen chunk is leased with the usual compare-and-set, only if it is free (a chunk this worker already
holds is never taken twice). The delivered chunk, when it is not the chosen one, keeps its place in the
database: a later message of the queue claims it, or the reconciler sends it again. So there is still one
claim per message, and no chunk depends on its own message (invariant 1). Keyword-only arguments; no HTTP
errors.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, and_, exists, func, or_, select, text
from sqlalchemy.orm import Session

from vlbatch.db import claim_counts, claim_statement, leases
from vlbatch.db.bulk import ID_BATCH
from vlbatch.db.claim_tables import JobClaim
from vlbatch.db.models import ACTIVE_JOBS_SQL, Chunk, Item, Job, JobStatus, utcnow
from vlbatch.db.queues import queue_paused

# Free chunks of one job tried before the next job: others may win the same chunks meanwhile.
TRIES_PER_JOB = 4
# Unclaimed jobs read per page of a claim's walk; a walk rarely needs a second page (each job read has a free chunk).
PAGE = 16
_NEVER = datetime.max.replace(tzinfo=UTC)
_ACTIVE = (JobStatus.QUEUED, JobStatus.RUNNING)  # as ACTIVE_JOBS_SQL


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


@dataclass(frozen=True)
class _Job:
    id: str
    tenant: str
    deadline: datetime | None
    created_at: datetime | None
    recent: int  # the job's claims within the window

    def key(self) -> tuple[Any, ...]:
        """The order within a tenant (and between tenants of even shares): see the module."""
        deadline = _aware(self.deadline)
        return (deadline is None, deadline or _NEVER, self.recent, _aware(self.created_at) or _NEVER, self.id)


def _active(model: str, priority: str) -> ColumnElement[bool]:
    # The partial indexes' predicate word for word (``ACTIVE_JOBS_SQL``), so both databases use them.
    return and_(Job.model == model, Job.priority == priority, text("jobs." + ACTIVE_JOBS_SQL))


def _free(now: datetime) -> ColumnElement[bool]:
    """The job has a chunk a claim could lease now."""
    return exists().where(
        Chunk.job_id == Job.id,
        Chunk.done.is_(False),
        or_(Chunk.lease_owner.is_(None), Chunk.lease_expires_at < now),
    )


def _tenants(session: Session, *, model: str, priority: str) -> Any:
    """The tenants with an active job on the queue, as a CTE: one index seek per tenant (a skip scan), not a row
    per job."""
    active = _active(model, priority)

    def after(tenant: Any) -> Any:
        # ORDER BY ... LIMIT 1 rather than min(): a planner without statistics may aggregate a whole index for min.
        later = [] if tenant is None else [Job.tenant > tenant]
        return select(Job.tenant).where(active, *later).order_by(Job.tenant).limit(1).scalar_subquery()

    walk = select(after(None).label("tenant")).cte("tenants", recursive=True)
    return walk.union_all(select(after(walk.c.tenant)).where(walk.c.tenant.is_not(None)))


def _unclaimed_filter(model: str, priority: str, *, dated: bool, since: datetime, now: datetime) -> list[Any]:
    """Active jobs of the queue with no claim in the window and a free chunk, with a deadline or without."""
    recent = exists().where(JobClaim.job_id == Job.id, JobClaim.bucket >= claim_counts.bucket_of(since))
    has_deadline = Job.deadline.is_not(None) if dated else Job.deadline.is_(None)
    return [_active(model, priority), has_deadline, ~recent, _free(now)]


def _heads(
    session: Session, *, model: str, priority: str, since: datetime, now: datetime
) -> dict[str, tuple[_Job | None, _Job | None]]:
    """Each tenant with an active job on the queue: its first unclaimed job with a deadline and its first without
    (``_unclaimed``'s order), found by one statement along the tenant's index: a few rows per tenant."""
    tenants = _tenants(session, model=model, priority=priority)

    def head(dated: bool) -> Any:
        unclaimed = _unclaimed_filter(model, priority, dated=dated, since=since, now=now)
        return (
            select(Job.id)
            .where(Job.tenant == tenants.c.tenant, *unclaimed)
            .order_by(Job.deadline, Job.created_at, Job.id)
            .limit(1)
            .scalar_subquery()
        )

    heads = session.execute(
        select(tenants.c.tenant, head(True), head(False)).where(tenants.c.tenant.is_not(None))
    ).all()
    ids = [i for _, dated, undated in heads for i in (dated, undated) if i is not None]
    rows = {
        r[0]: _Job(r[0], r[1], r[2], r[3], 0)
        for r in session.execute(select(Job.id, Job.tenant, Job.deadline, Job.created_at).where(Job.id.in_(ids)))
    }
    return {t: (rows.get(dated), rows.get(undated)) for t, dated, undated in heads}


def _recently_claimed(
    session: Session,
    *,
    model: str,
    priority: str,
    since: datetime,
    now: datetime,
    tenants: list[str] | None = None,
    outranked: list[str] | None = None,
) -> list[_Job]:
    """The queue's active jobs with claims in the window (and a free chunk), with their counts; only ``tenants``'
    when given, and without the jobs with no deadline of the ``outranked`` tenants (each has an unclaimed one,
    which goes first). Bounded by the window's claims, not by the queue."""
    # The window's counts first, then their jobs by key: the read starts from the counters, never from the
    # queue's jobs (a planner without statistics may hash every active job to join them).
    counts: dict[str, int] = {
        job_id: int(n)
        for job_id, n in session.execute(
            select(JobClaim.job_id, func.sum(JobClaim.n))
            .where(JobClaim.bucket >= claim_counts.bucket_of(since))
            .group_by(JobClaim.job_id)
        ).all()
    }
    ids = list(counts)
    rows = [
        row
        for start in range(0, len(ids), ID_BATCH)
        for row in session.execute(
            # By key only: naming the partial index's predicate here could lead a planner to walk the index.
            select(Job.id, Job.tenant, Job.deadline, Job.created_at, Job.model, Job.priority, Job.status).where(
                Job.id.in_(ids[start : start + ID_BATCH]), _free(now)
            )
        ).all()
    ]
    left_out = set(outranked or [])
    rows = [
        r
        for r in rows
        if (r.model, r.priority) == (model, priority)
        and r.status in _ACTIVE
        and (tenants is None or r.tenant in tenants)
        and (r.deadline is not None or r.tenant not in left_out)
    ]
    return [_Job(r[0], r[1], r[2], r[3], counts[r[0]]) for r in rows]


def _unclaimed(
    session: Session,
    *,
    model: str,
    priority: str,
    tenant: str,
    dated: bool,
    since: datetime,
    now: datetime,
    after: _Job,
    limit: int,
) -> list[_Job]:
    """The tenant's next ``limit`` unclaimed jobs of the class after ``after``, in its order: a page along the
    tenant's index, from where the last one ended (keyset paging: no offset to count through)."""
    if dated:
        later = or_(
            Job.deadline > after.deadline,
            and_(Job.deadline == after.deadline, Job.created_at > after.created_at),
            and_(Job.deadline == after.deadline, Job.created_at == after.created_at, Job.id > after.id),
        )
    else:
        later = or_(Job.created_at > after.created_at, and_(Job.created_at == after.created_at, Job.id > after.id))
    rows = session.execute(
        select(Job.id, Job.tenant, Job.deadline, Job.created_at)
        .where(Job.tenant == tenant, later, *_unclaimed_filter(model, priority, dated=dated, since=since, now=now))
        .order_by(Job.deadline, Job.created_at, Job.id)
        .limit(limit)
    ).all()
    return [_Job(r[0], r[1], r[2], r[3], 0) for r in rows]


def _by_share(shares: Shares, counts: Mapping[str, int], tenants: Any) -> list[list[str]]:
    """The tenants in groups of even weighted shares of the queue's recent claims, lowest share first."""
    groups: dict[float, list[str]] = {}
    for tenant in tenants:
        groups.setdefault(counts.get(tenant, 0) / shares.weight(tenant), []).append(tenant)
    return [sorted(groups[share]) for share in sorted(groups)]


def walk(session: Session, *, model: str, priority: str, now: datetime, shares: Shares) -> Iterator[str]:
    """The queue's active jobs that have a free chunk, best first, each once (``_walk``)."""
    seen: set[str] = set()
    for job_id in _walk(session, model=model, priority=priority, now=now, shares=shares):
        if job_id not in seen:  # a deadline PostgreSQL holds past Python's range reads clamped, and may recur
            seen.add(job_id)
            yield job_id


def _walk(session: Session, *, model: str, priority: str, now: datetime, shares: Shares) -> Iterator[str]:
    """The queue's active jobs that have a free chunk, best first (the module's order), read lazily.

    Tenants of even shares go together, lowest share first; within them the jobs with a deadline, then those
    without. Each class merges the jobs claimed in the window (with their counts) and each tenant's unclaimed
    jobs, a stream read in pages along the tenant's index from its head (its first one, which one statement
    finds for every tenant). A claim stops at the first job it leases a chunk of, so it reads the tenants, the
    window's counters and a row or two per tenant, not the queue."""
    since = now - shares.window
    counts = claim_counts.tenant_counts(session, model=model, priority=priority, since=since)
    heads = _heads(session, model=model, priority=priority, since=since, now=now)
    with_undated = [t for t, (_dated, undated) in heads.items() if undated is not None]
    claimed = _recently_claimed(session, model=model, priority=priority, since=since, now=now, outranked=with_undated)
    for tenants in _by_share(shares, counts, heads):
        for dated in (True, False):
            known = [j for j in claimed if j.tenant in tenants and (j.deadline is not None) == dated]
            streams = {t: [h] for t in tenants if (h := heads[t][0 if dated else 1]) is not None}
            yield from _merge(
                session,
                model=model,
                priority=priority,
                since=since,
                now=now,
                dated=dated,
                known=known,
                streams=streams,
            )
            if not dated and streams:
                # The jobs without a deadline left out above (claimed, of tenants with an unclaimed one): after
                # every unclaimed job of the class, which the merge has all given by now.
                late = _recently_claimed(session, model=model, priority=priority, since=since, now=now, tenants=tenants)
                left = {j.id for j in known}
                yield from (j.id for j in sorted(late, key=_Job.key) if j.deadline is None and j.id not in left)


def _merge(
    session: Session,
    *,
    model: str,
    priority: str,
    since: datetime,
    now: datetime,
    dated: bool,
    known: list[_Job],
    streams: dict[str, list[_Job]],
) -> Iterator[str]:
    """The class's jobs in order: ``known`` (claimed in the window) merged with each tenant's stream of unclaimed
    ones, whose buffered rows are read further, a page at a time, when a tenant's last one is given."""
    heap = [(jobs[0].key(), tenant) for tenant, jobs in streams.items()]
    heapq.heapify(heap)
    known = sorted(known, key=_Job.key, reverse=True)  # popped from the end, best first
    full = dict.fromkeys(streams, True)  # the head is a page of one: more may follow
    while heap or known:
        if known and (not heap or known[-1].key() < heap[0][0]):
            yield known.pop().id
            continue
        _key, tenant = heapq.heappop(heap)
        job = streams[tenant].pop(0)
        yield job.id
        if not streams[tenant] and full[tenant]:
            page = _unclaimed(
                session,
                model=model,
                priority=priority,
                tenant=tenant,
                dated=dated,
                since=since,
                now=now,
                after=job,
                limit=PAGE,
            )
            streams[tenant], full[tenant] = page, len(page) == PAGE
        if streams[tenant]:
            heapq.heappush(heap, (streams[tenant][0].key(), tenant))


def ranked_jobs(session: Session, *, model: str, priority: str, now: datetime, shares: Shares) -> list[str]:
    """The queue's active jobs (queued or running), best first (see the module), every one of them: a view of the
    whole order. A claim walks it lazily instead (``walk``)."""
    since = now - shares.window
    counts = claim_counts.tenant_counts(session, model=model, priority=priority, since=since)
    recent: dict[str, int] = {
        job_id: int(n)
        for job_id, n in session.execute(
            select(JobClaim.job_id, func.sum(JobClaim.n))
            .join(Job, Job.id == JobClaim.job_id)
            .where(JobClaim.bucket >= claim_counts.bucket_of(since), _active(model, priority))
            .group_by(JobClaim.job_id)
        ).all()
    }
    jobs = [
        _Job(r[0], r[1], r[2], r[3], recent.get(r[0], 0))
        for r in session.execute(
            select(Job.id, Job.tenant, Job.deadline, Job.created_at).where(_active(model, priority))
        ).all()
    ]
    return [j.id for j in sorted(jobs, key=lambda j: (counts[j.tenant] / shares.weight(j.tenant), *j.key()))]


def _free_chunks(session: Session, *, job_id: str, now: datetime, limit: int) -> list[int]:
    """A job's first free chunks. On PostgreSQL they are locked, skipping those another claim holds locked: two
    workers claiming at once take different chunks instead of one waiting on the other's lease."""
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
            .with_for_update(skip_locked=True)
        )
    )


class Rankings:
    """Rankings of whole queues (``ranked_jobs``) reused for ``ttl_s`` (monotonic seconds), for views of the order
    that may lag it by that long. Claims do not use it: they walk the order afresh (``walk``), at a bounded cost."""

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
) -> tuple[int | None, list[Item]]:
    """Claim the best free chunk of the delivered chunk's queue. Returns the chunk leased to ``owner`` (None when
    none was: the queue is paused or has nothing free, or, given ``model``, the model the caller serves, the
    delivered chunk is another model's) and its unfinished items ([] for a leased chunk whose items are all
    finished: a worker died after its last write, and the caller finishes it). A new lease is counted in the
    queue's claim counters (``claim_counts``), which the next claims' fair shares read."""
    now = now or utcnow()
    taken_by_others = None
    if session.get_bind().dialect.name == "postgresql":
        # One statement picks the best job and leases it (``claim_statement``). The steps below run only when it
        # did not claim from the delivered chunk's queue (they tell why), or to walk on past its best job when that
        # job's free chunks were all being claimed by others at that moment.
        claimed = claim_statement.claim_best(
            session,
            delivered=delivered,
            owner=owner,
            served=model,
            lease=lease,
            now=now,
            weights={tenant: shares.weight(tenant) for tenant in shares.weights},
            window=shares.window,
        )
        if claimed.leased is not None:
            return claimed.leased, claimed.items
        if claimed.claimable and claimed.best is None:
            return None, []
        taken_by_others = claimed.best
    found = session.execute(
        select(Chunk.job_id, Chunk.lease_owner, Chunk.done, Job.model, Job.priority, queue_paused())
        .join(Job, Job.id == Chunk.job_id)
        .where(Chunk.id == delivered)
    ).one_or_none()
    if found is None:
        return None, []
    delivered_job, holder, done, queue_model, priority, paused = found
    if holder == owner and not done:  # a redelivery of a chunk this worker holds: no new claim
        return delivered, leases.claim_chunk(session, chunk_id=delivered, owner=owner, lease=lease, model=model)
    if paused or (model is not None and queue_model != model):
        return None, []
    for job_id in walk(session, model=queue_model, priority=priority, now=now, shares=shares):
        if job_id == taken_by_others:
            continue
        leased = None
        # The delivered chunk first, when its job is the one due: most claims then cost one lease, no search.
        if job_id == delivered_job and _lease(session, delivered, owner=owner, lease=lease, now=now):
            leased = delivered
        else:
            for cid in _free_chunks(session, job_id=job_id, now=now, limit=TRIES_PER_JOB):
                if cid != delivered and _lease(session, cid, owner=owner, lease=lease, now=now):
                    leased = cid
                    break
        if leased is not None:
            items = leases.take_items(session, chunk_id=leased, now=now)
            job = session.get(Job, job_id)
            if job is not None:
                claim_counts.record(
                    session,
                    job_id=job_id,
                    model=queue_model,
                    priority=priority,
                    tenant=job.tenant,
                    at=now,
                    window=shares.window,
                )
            return leased, items
    return None, []


def _lease(session: Session, chunk_id: int, *, owner: str, lease: timedelta, now: datetime) -> bool:
    return leases.lease_chunk(session, chunk_id=chunk_id, owner=owner, lease=lease, now=now, free_only=True)

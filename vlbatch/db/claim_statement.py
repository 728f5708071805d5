"""A claim on PostgreSQL in one statement: the best job of the delivered chunk's queue, a chunk of it leased, its items
taken, the job marked started and the claim counted, in one round trip (and the commit).

The order is ``claim_order``'s, and the best job is the first one ``claim_order.walk`` gives: the least, by its
tenant's weighted share and then the job's key (``claim_order._Job.key``), of the jobs with a free chunk. Only the
tenants of the lowest share that have a free chunk can hold it (found by asking tenants in share order), and among
their jobs only two kinds can be least: each tenant's first unclaimed job with a free chunk in the order of the
partial index of active jobs (deadline first, NULLs last, then created_at and id: the walk's heads, of which the
dated one, when there is one, goes before the other), and the jobs claimed within the window; every other job comes
after its tenant's head. So one ``ORDER BY ... LIMIT 1`` over a row or two per tenant finds it, asking the claimed
jobs for a free chunk only in that order, and the statement goes on to lease it:

- the delivered chunk when it is the best job's and free, else the job's first free chunk, each picked ``FOR UPDATE
  SKIP LOCKED`` along the chunks' ``(job_id, done, seq)`` index: two workers claiming at once take different
  chunks, neither waits for the other's; the lease is the compare-and-set of ``leases.lease_chunk(free_only=True)``;
- the leased chunk's open items marked running (``leases.take_items``), the job marked started on its first claim,
  and the claim counted in the tenant's and the job's buckets (``claim_counts.record``), by data-modifying CTEs that
  read the lease's ``RETURNING``: nothing of them happens when nothing was leased.

Its text never varies (the tenants' weights are two array parameters), so psycopg prepares it after a few
executions. Timestamps are compared as Python holds them (clamped to its range: ``pg_timestamps``) and job ids byte
by byte (``COLLATE "C"``), as the walk's keys compare. When it claims nothing from the delivered chunk's queue, or
the best job's free chunks are all being claimed by others at that moment, the caller goes on
(``claim_order.claim_next``). Keyword-only arguments; no HTTP errors.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import Float, Integer, String, bindparam, column, select, text
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.orm import Session

from vlbatch.db import claim_counts
from vlbatch.db.models import ACTIVE_JOBS_SQL, Item, ItemStatus, JobStatus

# Python's datetime range (``pg_timestamps.EARLIEST`` and ``LATEST``): keys compare clamped timestamps, as read.
_EARLIEST = "'0001-01-01 00:00:00+00'::timestamptz"
_LATEST = "'9999-12-31 23:59:59.999999+00'::timestamptz"


def _clamped(expr: str) -> str:
    return f"LEAST(GREATEST(COALESCE({expr}, {_LATEST}), {_EARLIEST}), {_LATEST})"


# A free chunk: not done, and no owner or an expired lease (``claim_order._free``).
_FREE = "NOT {c}.done AND ({c}.lease_owner IS NULL OR {c}.lease_expires_at < :now)"
# Per-row probes are scalar subqueries, which PostgreSQL runs per row as written: an EXISTS may become a join, and
# one planned without statistics (a new or bulk-loaded table) may hash the whole queue to answer a few rows.
_UNCLAIMED = "(SELECT true FROM job_claims jc WHERE jc.job_id = {j}.id AND jc.bucket >= :since LIMIT 1) IS NULL"
_HAS_FREE = "(SELECT true FROM chunks c WHERE c.job_id = {j}.id AND " + _FREE.format(c="c") + " LIMIT 1) IS NOT NULL"
# The active jobs of the queue along the partial index (its predicate named with the same literals,
# ``ACTIVE_JOBS_SQL``), in its order: by tenant, then deadline (NULLs last), created_at and id.
_QUEUE = f"j.model = (SELECT model FROM queue) AND j.priority = (SELECT priority FROM queue) AND j.{ACTIVE_JOBS_SQL}"
_ORDER = "j.deadline, j.created_at, j.id"

_SQL = f"""
WITH RECURSIVE queue AS (
    -- The delivered chunk's queue, unless its chunk is a redelivery to the worker holding it, the queue is paused,
    -- or the chunk is for another model than the one the caller serves: then nothing here, and the caller reads why.
    SELECT j.model, j.priority FROM chunks c JOIN jobs j ON j.id = c.job_id
    WHERE c.id = :delivered AND (c.lease_owner IS DISTINCT FROM :owner OR c.done)
      AND (CAST(:served AS text) IS NULL OR j.model = :served)
      AND NOT EXISTS (SELECT 1 FROM paused_queues p WHERE p.model = j.model AND p.priority = j.priority)
),
firsts AS (
    -- Each tenant's first active job (a skip scan: one index seek per tenant, not a row per job).
    (SELECT j.tenant, j.id, j.deadline, j.created_at FROM jobs j WHERE {_QUEUE} ORDER BY j.tenant, {_ORDER} LIMIT 1)
    UNION ALL
    SELECT n.* FROM firsts f CROSS JOIN LATERAL (
        SELECT j.tenant, j.id, j.deadline, j.created_at FROM jobs j
        WHERE {_QUEUE} AND j.tenant > f.tenant ORDER BY j.tenant, {_ORDER} LIMIT 1
    ) n
),
counts AS (
    SELECT tc.tenant, sum(tc.n) AS n FROM tenant_claims tc
    WHERE tc.model = (SELECT model FROM queue) AND tc.priority = (SELECT priority FROM queue) AND tc.bucket >= :since
    GROUP BY tc.tenant
),
weights AS (
    SELECT * FROM unnest(CAST(:weighed AS text[]), CAST(:weights AS float8[])) AS w(tenant, weight)
),
shares AS (
    -- Each tenant's weighted share of the queue's recent claims.
    SELECT f.*, COALESCE(s.n, 0)::float8 / COALESCE(w.weight, 1.0::float8) AS share
    FROM firsts f LEFT JOIN counts s ON s.tenant = f.tenant LEFT JOIN weights w ON w.tenant = f.tenant
),
lowest AS (
    -- The lowest share of a tenant with a free chunk: tenants in share order, each asked in turn (most often the
    -- first has one). Only that share's tenants can hold the best job.
    SELECT t.share FROM (SELECT * FROM shares ORDER BY share OFFSET 0) t
    WHERE (SELECT true FROM jobs j WHERE {_QUEUE} AND j.tenant = t.tenant AND {_HAS_FREE.format(j="j")} LIMIT 1)
    LIMIT 1
),
due AS (
    SELECT * FROM shares WHERE share = (SELECT share FROM lowest)
),
heads AS (
    -- Each such tenant's first unclaimed job with a free chunk: its first active job, most often, else a walk
    -- along its jobs. One head per tenant is enough: a tenant's job with a deadline goes before all its others.
    SELECT h.* FROM due f CROSS JOIN LATERAL (
        (SELECT f.id, f.tenant, f.deadline, f.created_at, 0::bigint AS recent
         WHERE {_UNCLAIMED.format(j="f")} AND {_HAS_FREE.format(j="f")})
        UNION ALL
        (SELECT j.id, j.tenant, j.deadline, j.created_at, 0::bigint FROM jobs j
         WHERE {_QUEUE} AND j.tenant = f.tenant AND {_UNCLAIMED.format(j="j")} AND {_HAS_FREE.format(j="j")}
         ORDER BY {_ORDER} LIMIT 1)
        LIMIT 1
    ) h
),
claimed AS (
    -- The queue's jobs claimed in the window, each looked up by its key alone (LIMIT: never a join of the queue,
    -- and the queue's test outside: named inside, it could lead a planner to walk the partial index instead).
    SELECT j.id, j.tenant, j.deadline, j.created_at, r.n AS recent
    FROM (SELECT jc.job_id, sum(jc.n) AS n FROM job_claims jc WHERE jc.bucket >= :since GROUP BY jc.job_id) r
    CROSS JOIN LATERAL (
        SELECT j.id, j.tenant, j.deadline, j.created_at, j.model, j.priority, j.status FROM jobs j
        WHERE j.id = r.job_id LIMIT 1
    ) j
    WHERE {_QUEUE}
),
best AS (
    -- The least by the walk's key of the heads and of the claimed jobs of the same tenants that have a free chunk,
    -- asked in that order until one passes (a head has one). The tenant test is inside the OR, so PostgreSQL
    -- hashes those tenants once rather than joining them to the claimed jobs.
    SELECT u.id, u.tenant FROM (
        SELECT * FROM (SELECT * FROM heads UNION ALL SELECT * FROM claimed) u
        ORDER BY u.deadline IS NULL, {_clamped("u.deadline")}, u.recent, {_clamped("u.created_at")}, u.id COLLATE "C"
        OFFSET 0
    ) u
    WHERE u.recent = 0 OR (u.tenant IN (SELECT tenant FROM due) AND {_HAS_FREE.format(j="u")})
    LIMIT 1
),
leased AS (
    UPDATE chunks SET lease_owner = :owner, lease_expires_at = :expires, sends = 0, claimed_at = :now
    WHERE chunks.id = COALESCE(
        (SELECT c.id FROM chunks c
         WHERE c.id = :delivered AND c.job_id = (SELECT id FROM best) AND {_FREE.format(c="c")}
         FOR UPDATE SKIP LOCKED),
        (SELECT c.id FROM chunks c
         WHERE c.job_id = (SELECT id FROM best) AND {_FREE.format(c="c")}
         ORDER BY c.seq LIMIT 1
         FOR UPDATE SKIP LOCKED))
      AND {_FREE.format(c="chunks")}
      AND NOT EXISTS (
        SELECT 1 FROM jobs j WHERE j.id = chunks.job_id AND (j.status = '{JobStatus.PAUSED.value}' OR EXISTS (
            SELECT 1 FROM paused_queues p WHERE p.model = j.model AND p.priority = j.priority)))
    RETURNING chunks.id, chunks.job_id
),
taken AS (
    UPDATE items SET status = '{ItemStatus.RUNNING.value}', attempts = items.attempts + 1, updated_at = :now
    WHERE items.chunk_id = (SELECT id FROM leased)
      AND items.status IN ('{ItemStatus.QUEUED.value}', '{ItemStatus.RUNNING.value}')
    RETURNING items.*
),
started AS (
    UPDATE jobs SET started_at = :now, status = '{JobStatus.RUNNING.value}'
    WHERE jobs.id = (SELECT job_id FROM taken LIMIT 1) AND jobs.started_at IS NULL
),
tenant_counted AS (
    INSERT INTO tenant_claims (model, priority, bucket, tenant, n)
    SELECT queue.model, queue.priority, :bucket, best.tenant, 1 FROM queue, leased, best
    ON CONFLICT (model, priority, bucket, tenant) DO UPDATE SET n = tenant_claims.n + 1
),
job_counted AS (
    INSERT INTO job_claims (job_id, bucket, n)
    SELECT leased.job_id, :bucket, 1 FROM leased
    ON CONFLICT (job_id, bucket) DO UPDATE SET n = job_claims.n + 1
)
SELECT best.id AS best_job, leased.id AS leased_chunk, {", ".join("taken." + c.name for c in Item.__table__.columns)}
FROM queue LEFT JOIN best ON true LEFT JOIN leased ON true LEFT JOIN taken ON true
ORDER BY taken.seq
"""

_STATEMENT = (
    text(_SQL)
    .bindparams(
        bindparam("served", type_=String),
        bindparam("weighed", type_=ARRAY(String)),
        bindparam("weights", type_=ARRAY(Float)),
    )
    .columns(column("best_job", String), column("leased_chunk", Integer), *Item.__table__.columns)
)


@dataclass(frozen=True)
class Claimed:
    """What the statement did. ``claimable``: the delivered chunk's queue was claimed from (False: the chunk is a
    redelivery to its holder, its queue is paused, it is another model's or it does not exist; nothing was done).
    ``best``: the queue's best job (None: no chunk of the queue is free). ``leased``: the chunk leased (None: the
    best job's free chunks were all being claimed by others). ``items``: its open items, taken."""

    claimable: bool
    best: str | None = None
    leased: int | None = None
    items: list[Item] = field(default_factory=list)


def claim_best(
    session: Session,
    *,
    delivered: int,
    owner: str,
    served: str | None,
    lease: timedelta,
    now: datetime,
    weights: Mapping[str, float],
    window: timedelta,
) -> Claimed:
    """Lease ``owner`` a chunk of the best job of the delivered chunk's queue (the module's statement) and count the
    claim. ``served``: the model the caller serves (None: any); ``weights``: each tenant's weight, already bounded
    below (``claim_order.Shares.weight``), others weigh 1."""
    rows = session.execute(
        select(column("best_job", String), column("leased_chunk", Integer), Item)
        .from_statement(_STATEMENT)
        .execution_options(populate_existing=True),
        {
            "delivered": delivered,
            "owner": owner,
            "served": served,
            "now": now,
            "expires": now + lease,
            "since": claim_counts.bucket_of(now - window),
            "bucket": claim_counts.bucket_of(now),
            "weighed": list(weights),
            "weights": [float(w) for w in weights.values()],
        },
    ).all()
    if not rows:
        return Claimed(claimable=False)
    best, leased = rows[0][0], rows[0][1]
    if leased is not None:
        claim_counts.sweep_when_due(session, at=now, window=window)
    return Claimed(True, best, leased, [row[2] for row in rows if row[2] is not None])

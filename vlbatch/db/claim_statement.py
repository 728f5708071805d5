"""A claim on PostgreSQL in one statement: the queue's best job, a chunk of it leased, its items taken, the job
marked started and the claim counted, in one round trip.

The order is ``claim_order``'s, and the best job is the first one ``claim_order.walk`` would give: the walk's first
job is the least, by the tenant's weighted share and then the job's key (``claim_order._Job.key``), among each
tenant's first unclaimed job of each class (its heads, which the walk also starts from) and the jobs claimed within
the window; every other job of the queue comes after its tenant's head of the same class. So one ``ORDER BY ...
LIMIT 1`` over those few rows per tenant finds it, and the statement goes on to lease it:

- the delivered chunk when it is the best job's and free, else the job's first free chunk, each picked ``FOR UPDATE
  SKIP LOCKED`` along the chunks' ``(job_id, done, seq)`` index: two workers claiming at once take different
  chunks, neither waits for the other; the lease is the usual compare-and-set (``leases.lease_chunk``);
- the leased chunk's open items marked running (``leases.take_items``), the job marked started on its first claim,
  and the claim counted in the tenant's and the job's buckets (``claim_counts.record``), by data-modifying CTEs that
  read the lease's ``RETURNING``: nothing of them happens when nothing was leased.

The statement's text never varies (the tenants' weights are two array parameters), so psycopg prepares it after a
few executions. Timestamps are compared as Python holds them (clamped to its range: ``pg_timestamps``) and job ids
byte by byte (``COLLATE "C"``), as the walk's keys compare. When the best job's free chunks are all being claimed
by others at that moment, nothing is leased and the caller walks the order further (``claim_order.claim_next``).
Keyword-only arguments; no HTTP errors.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
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
_QUEUE = f"j.model = :model AND j.priority = :priority AND j.{ACTIVE_JOBS_SQL}"
_ORDER = "j.deadline, j.created_at, j.id"

_SQL = f"""
WITH RECURSIVE firsts AS (
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
    WHERE tc.model = :model AND tc.priority = :priority AND tc.bucket >= :since
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
    -- The queue's jobs claimed in the window, by key (LIMIT: a lookup for each one, never a join of the queue).
    SELECT j.id, j.tenant, j.deadline, j.created_at, r.n AS recent
    FROM (SELECT jc.job_id, sum(jc.n) AS n FROM job_claims jc WHERE jc.bucket >= :since GROUP BY jc.job_id) r
    CROSS JOIN LATERAL (
        SELECT j.id, j.tenant, j.deadline, j.created_at FROM jobs j WHERE j.id = r.job_id AND {_QUEUE} LIMIT 1
    ) j
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
    SELECT :model, :priority, :bucket, best.tenant, 1 FROM leased, best
    ON CONFLICT (model, priority, bucket, tenant) DO UPDATE SET n = tenant_claims.n + 1
),
job_counted AS (
    INSERT INTO job_claims (job_id, bucket, n)
    SELECT leased.job_id, :bucket, 1 FROM leased
    ON CONFLICT (job_id, bucket) DO UPDATE SET n = job_claims.n + 1
)
SELECT best.id AS best_job, leased.id AS leased_chunk, {", ".join("taken." + c.name for c in Item.__table__.columns)}
FROM best LEFT JOIN leased ON true LEFT JOIN taken ON true
ORDER BY taken.seq
"""

_STATEMENT = (
    text(_SQL)
    .bindparams(bindparam("weighed", type_=ARRAY(String)), bindparam("weights", type_=ARRAY(Float)))
    .columns(column("best_job", String), column("leased_chunk", Integer), *Item.__table__.columns)
)


@dataclass(frozen=True)
class Claimed:
    """What the statement did: ``best`` the best job (None: the queue has no free chunk), ``leased`` the chunk leased
    (None: the best job's free chunks were all being claimed by others), ``items`` its open items, taken."""

    best: str | None
    leased: int | None
    items: list[Item]


def claim_best(
    session: Session,
    *,
    model: str,
    priority: str,
    delivered: int,
    owner: str,
    lease: timedelta,
    now: datetime,
    weights: Mapping[str, float],
    window: timedelta,
) -> Claimed:
    """Lease a chunk of the queue's best job (the module's statement) and count the claim; ``weights`` are each
    tenant's weight, already bounded below (``claim_order.Shares.weight``), others weigh 1."""
    rows = session.execute(
        select(column("best_job", String), column("leased_chunk", Integer), Item)
        .from_statement(_STATEMENT)
        .execution_options(populate_existing=True),
        {
            "model": model,
            "priority": priority,
            "delivered": delivered,
            "owner": owner,
            "now": now,
            "expires": now + lease,
            "since": claim_counts.bucket_of(now - window),
            "bucket": claim_counts.bucket_of(now),
            "weighed": list(weights),
            "weights": [float(w) for w in weights.values()],
        },
    ).all()
    if not rows:
        return Claimed(None, None, [])
    best, leased = rows[0][0], rows[0][1]
    if leased is not None:
        claim_counts.sweep_when_due(session, at=now, window=window)
    return Claimed(best, leased, [row[2] for row in rows if row[2] is not None])

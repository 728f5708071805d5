"""Recent claims per tenant and per job of a queue, counted in time buckets as claims are made.

Fair shares (``claim_order``) weigh each tenant's claims on a queue within a window, and within a tenant put the
job with the fewest recent claims first. Counting them from the chunks would read every job of the queue; the
counters are bumped by each claim instead, so a read is bounded by tenants (or recently claimed jobs) times the
window's buckets, whatever the queue's length. A bucket is ``BUCKET_S`` seconds; a window counts every bucket
that overlaps it (a claim up to one bucket older than the window may count). Buckets older than any window are
swept once per bucket by the claims themselves. Keyword-only arguments; no HTTP errors.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from vlbatch.db.claim_tables import JobClaim, TenantClaim

# Ten seconds: a ten-minute window (the default) is 60 buckets, counted to within a sixtieth.
BUCKET_S = 10
_swept: dict[str, int] = {}  # per database: the last bucket swept, so a sweep runs once per bucket


def bucket_of(at: datetime) -> int:
    """The start (unix seconds) of the bucket holding ``at``."""
    return int(at.timestamp()) // BUCKET_S * BUCKET_S


def _upsert(session: Session, table: Any, values: dict[str, Any], keys: list[str]) -> None:
    from sqlalchemy.dialects import postgresql, sqlite

    module: Any = postgresql if session.get_bind().dialect.name == "postgresql" else sqlite
    stmt = module.insert(table).values(**values, n=1)
    session.execute(stmt.on_conflict_do_update(index_elements=keys, set_={"n": table.n + 1}))


def record(
    session: Session, *, job_id: str, model: str, priority: str, tenant: str, at: datetime, window: timedelta
) -> None:
    """Count one claim of ``job_id`` (of ``tenant``, on the queue ``model``/``priority``) at ``at``; buckets
    before ``window`` (the fair shares' window) are swept once per bucket."""
    bucket = bucket_of(at)
    _upsert(
        session,
        TenantClaim,
        {"model": model, "priority": priority, "bucket": bucket, "tenant": tenant},
        ["model", "priority", "bucket", "tenant"],
    )
    _upsert(session, JobClaim, {"job_id": job_id, "bucket": bucket}, ["job_id", "bucket"])
    sweep_when_due(session, at=at, window=window)


def sweep_when_due(session: Session, *, at: datetime, window: timedelta) -> None:
    """Sweep the buckets before ``window`` at the first claim of each bucket (per database and process)."""
    bucket = bucket_of(at)
    url = str(session.get_bind().engine.url)
    if _swept.get(url) != bucket:
        _swept[url] = bucket
        sweep(session, before=bucket_of(at - window) - BUCKET_S)


def sweep(session: Session, *, before: int) -> None:
    """Forget the buckets that start before ``before`` (unix seconds)."""
    session.execute(delete(TenantClaim).where(TenantClaim.bucket < before))
    session.execute(delete(JobClaim).where(JobClaim.bucket < before))


def tenant_counts(session: Session, *, model: str, priority: str, since: datetime) -> Counter[str]:
    """Each tenant's claims on the queue since ``since`` (to the bucket), over all its jobs, finished ones too."""
    rows = session.execute(
        select(TenantClaim.tenant, func.sum(TenantClaim.n))
        .where(TenantClaim.model == model, TenantClaim.priority == priority, TenantClaim.bucket >= bucket_of(since))
        .group_by(TenantClaim.tenant)
    ).all()
    return Counter({tenant: int(n) for tenant, n in rows})

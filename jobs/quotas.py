"""Per-tenant quotas (``Settings.quota``): items per job, unfinished jobs at once, bytes per upload.

One protocol for every job a tenant makes (a submitted job, a re-run, a batch, a nightly run), insert then admit:

1. ``check_job_size`` before anything is stored (the item count is known: a listed folder, a counted file);
2. the job's rows are inserted in the caller's transaction, uncommitted;
3. ``admit_inserted_job`` takes the tenant's job-creation lock (``job_store.hold_tenant_job_creation``, held until the
   transaction ends) and counts the tenant's unfinished jobs, the new one included; over the quota, the caller
   rolls the job back with its transaction.

Locking after the insert keeps the lock to the count and the commit: a large job's item insert never runs while the
tenant's other creates wait, and under 200 concurrent submitters the API's threads do not all wait on one tenant's
lock. Still exact: whichever create locks second counts the first one's committed job as well as its own.

Over a quota is a ``JobRefused`` with its own code: 413 for a job or an upload that is too big, 429 (retryable) for
too many unfinished jobs. A route that takes an upload calls ``check_upload`` with the bytes it has received so far
(or the declared size), before storing them.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from jobs.errors import JobRefused
from vlbatch.db import job_store
from vlbatch.errors import ACTIVE_JOBS_QUOTA_EXCEEDED, ITEMS_QUOTA_EXCEEDED, UPLOAD_QUOTA_EXCEEDED
from vlbatch.settings import Settings


def check_job_size(settings: Settings, tenant: str, *, n_items: int) -> None:
    quota = settings.quota(tenant)
    if quota.max_items_per_job is not None and n_items > quota.max_items_per_job:
        raise JobRefused(
            ITEMS_QUOTA_EXCEEDED,
            f"{n_items} items exceed tenant '{tenant}''s quota of {quota.max_items_per_job} items per job",
        )


def admit_inserted_job(session: Session, settings: Settings, tenant: str) -> None:
    """The active-jobs quota for a job this transaction has just inserted (and not committed): it counts itself.
    The tenant's lock is held from here to the caller's commit or rollback; on a refusal the caller rolls back."""
    quota = settings.quota(tenant)
    if quota.max_active_jobs is None:
        return
    job_store.hold_tenant_job_creation(session, tenant=tenant)
    active = job_store.count_active_jobs(session, tenant=tenant) - 1  # the job just inserted is not "another" one
    if active >= quota.max_active_jobs:
        raise JobRefused(
            ACTIVE_JOBS_QUOTA_EXCEEDED,
            f"tenant '{tenant}' has {active} unfinished jobs, its quota is {quota.max_active_jobs}; "
            "retry when one finishes, or cancel one",
        )


def check_upload(settings: Settings, tenant: str, *, n_bytes: int) -> None:
    quota = settings.quota(tenant).max_upload_bytes
    if quota is not None and n_bytes > quota:
        raise JobRefused(
            UPLOAD_QUOTA_EXCEEDED,
            f"the upload of {n_bytes} bytes exceeds tenant '{tenant}''s quota of {quota} bytes",
        )

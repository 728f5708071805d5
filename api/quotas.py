"""Per-tenant quotas (``Settings.quota``): items per job, unfinished jobs at once, bytes per upload.

Checked before anything is stored, but for the active-jobs count of a new job, taken right after its insert
(``admit_inserted_job``) and rolled back with it when refused. Over a quota is a ``RequestRefused`` with its
own code: 413 for a job or an upload that is too big, 429 (retryable) for too many unfinished jobs. A route that
takes an upload calls ``check_upload`` with the bytes it has received so far (or the declared size), before
storing them.

The active-jobs check holds the tenant's job-creation lock (``crud.hold_tenant_job_creation``) until the
caller's transaction ends, so the count and the job inserted after it are one step: concurrent creates of one
tenant are answered one after another and exactly the quota's room gets through. The caller must insert the
job in the same transaction (and commit or roll back promptly: other creates of the tenant wait meanwhile).
``admit_inserted_job`` takes the lock after the insert, so only the count and the commit wait.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from api.deps import Principal
from api.errors import RequestRefused
from vlbatch.db import crud
from vlbatch.errors import ACTIVE_JOBS_QUOTA_EXCEEDED, ITEMS_QUOTA_EXCEEDED, UPLOAD_QUOTA_EXCEEDED
from vlbatch.settings import Settings


def check_new_job(session: Session, settings: Settings, principal: Principal, *, n_items: int) -> None:
    """Both quotas of a job about to be inserted; the tenant's lock is held from here to the commit."""
    check_job_size(settings, principal, n_items=n_items)
    _check_active_jobs(session, settings, principal, new_job_inserted=False)


def check_job_size(settings: Settings, principal: Principal, *, n_items: int) -> None:
    quota = settings.quota(principal.tenant)
    if quota.max_items_per_job is not None and n_items > quota.max_items_per_job:
        raise RequestRefused(
            ITEMS_QUOTA_EXCEEDED,
            f"{n_items} items exceed tenant '{principal.tenant}''s quota of {quota.max_items_per_job} items per job",
        )


def admit_inserted_job(session: Session, settings: Settings, principal: Principal) -> None:
    """The active-jobs quota for a job this transaction has just inserted (and not committed): it counts itself.

    Inserting first and locking after keeps the tenant's lock to the count and the commit: a large job's item
    insert no longer runs while the tenant's other creates wait, and under 200 concurrent submitters the API's
    threads no longer all wait on one tenant's lock. Still exact: whichever create locks second counts the first
    one's committed job as well as its own. On a refusal the caller rolls the job back."""
    _check_active_jobs(session, settings, principal, new_job_inserted=True)


def _check_active_jobs(session: Session, settings: Settings, principal: Principal, *, new_job_inserted: bool) -> None:
    quota = settings.quota(principal.tenant)
    if quota.max_active_jobs is None:
        return
    crud.hold_tenant_job_creation(session, tenant=principal.tenant)
    active = crud.count_active_jobs(session, tenant=principal.tenant) - int(new_job_inserted)
    if active >= quota.max_active_jobs:
        raise RequestRefused(
            ACTIVE_JOBS_QUOTA_EXCEEDED,
            f"tenant '{principal.tenant}' has {active} unfinished jobs, its quota is {quota.max_active_jobs}; "
            "retry when one finishes, or cancel one",
        )


def check_upload(settings: Settings, principal: Principal, *, n_bytes: int) -> None:
    quota = settings.quota(principal.tenant).max_upload_bytes
    if quota is not None and n_bytes > quota:
        raise RequestRefused(
            UPLOAD_QUOTA_EXCEEDED,
            f"the upload of {n_bytes} bytes exceeds tenant '{principal.tenant}''s quota of {quota} bytes",
        )

"""Per-tenant quotas (``Settings.quota``): items per job, unfinished jobs at once, bytes per upload, and what the
tenant's uploads hold together (bytes and files).

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

Uploads held follow the same insert-then-admit protocol: ``upload_room`` before a byte is read (refused at once
when the tenant is at its totals already; else the bytes left, which bound the stream), then the file's row is
inserted and ``admit_inserted_upload`` takes the tenant's lock and counts every upload the tenant holds, the new
one included, so 20 concurrent uploads cannot each see the room that only one of them fits in.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from jobs.refusals import JobRefused
from vlbatch.db import batches, job_store
from vlbatch.errors import (
    ACTIVE_JOBS_QUOTA_EXCEEDED,
    ITEMS_QUOTA_EXCEEDED,
    UPLOAD_QUOTA_EXCEEDED,
    UPLOADS_HELD_QUOTA_EXCEEDED,
)
from vlbatch.settings import Settings


def check_job_size(settings: Settings, tenant: str, *, n_items: int) -> None:
    quota = settings.quotas.quota(tenant)
    if quota.max_items_per_job is not None and n_items > quota.max_items_per_job:
        raise JobRefused(
            ITEMS_QUOTA_EXCEEDED,
            f"{n_items} items exceed tenant '{tenant}''s quota of {quota.max_items_per_job} items per job",
        )


def admit_inserted_job(session: Session, settings: Settings, tenant: str) -> None:
    """The active-jobs quota for a job this transaction has just inserted (and not committed): it counts itself.
    The tenant's lock is held from here to the caller's commit or rollback; on a refusal the caller rolls back."""
    quota = settings.quotas.quota(tenant)
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
    quota = settings.quotas.quota(tenant).max_upload_bytes
    if quota is not None and n_bytes > quota:
        raise JobRefused(
            UPLOAD_QUOTA_EXCEEDED,
            f"the upload of {n_bytes} bytes exceeds tenant '{tenant}''s quota of {quota} bytes",
        )


def upload_room(session: Session, settings: Settings, tenant: str) -> int | None:
    """Bytes one more upload of ``tenant`` may hold within its totals (None: no total); refused when the tenant's
    uploads are at a total already."""
    quota = settings.quotas.quota(tenant)
    if quota.max_upload_total_bytes is None and quota.max_upload_files is None:
        return None
    files, held = batches.uploads_held(session, tenant=tenant)
    _check_held(tenant, quota.max_upload_files, quota.max_upload_total_bytes, files=files + 1, held=held + 1)
    return None if quota.max_upload_total_bytes is None else quota.max_upload_total_bytes - held


def admit_inserted_upload(session: Session, settings: Settings, tenant: str) -> None:
    """The totals for an upload whose row this transaction has just inserted (and not committed): it counts itself.
    The tenant's lock is held to the caller's commit or rollback; on a refusal the caller rolls back."""
    quota = settings.quotas.quota(tenant)
    if quota.max_upload_total_bytes is None and quota.max_upload_files is None:
        return
    job_store.hold_tenant_job_creation(session, tenant=tenant)
    files, held = batches.uploads_held(session, tenant=tenant)
    _check_held(tenant, quota.max_upload_files, quota.max_upload_total_bytes, files=files, held=held)


def uploads_full(settings: Settings, tenant: str, *, room: int) -> JobRefused:
    """The refusal of an upload bigger than the ``room`` bytes the tenant's uploads held leave."""
    total = settings.quotas.quota(tenant).max_upload_total_bytes
    return JobRefused(
        UPLOADS_HELD_QUOTA_EXCEEDED,
        f"the upload is bigger than the {room} bytes left of tenant '{tenant}''s quota of {total} bytes for its "
        "uploads; delete files it no longer needs",
    )


def _check_held(tenant: str, max_files: int | None, max_bytes: int | None, *, files: int, held: int) -> None:
    if max_files is not None and files > max_files:
        raise JobRefused(
            UPLOADS_HELD_QUOTA_EXCEEDED,
            f"tenant '{tenant}' would hold {files} uploaded files, its quota is {max_files}; "
            "delete files it no longer needs",
        )
    if max_bytes is not None and held > max_bytes:
        raise JobRefused(
            UPLOADS_HELD_QUOTA_EXCEEDED,
            f"tenant '{tenant}''s uploads would hold {held} bytes, its quota is {max_bytes} bytes; "
            "delete files it no longer needs",
        )

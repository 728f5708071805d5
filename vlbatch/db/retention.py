"""Retention: when each ended job and each file expires, and deleting what expired in short transactions.

The rule, for the janitor (``jobs.janitor``), ``vlbatch gc`` and the API's ``expires_at`` alike:

- A job expires at its own ``expires_at`` (a batch's ``output_expires_after``), else ``finished_at`` plus its
  tenant's job retention (``tenant_retention.jobs_s``, else ``VLBATCH_RETENTION_JOBS_S``; 0 keeps it for ever). Only
  a finished or cancelled job is ever collected: a queued, running or paused one never is, whatever its times say;
  nor a job whose batch has not ended (its output is not written yet), nor one a registered hold keeps
  (``register_job_hold``: the webhook side keeps a job until its webhook was delivered or failed).
- A file expires at its own ``expires_at`` (its upload's ``expires_after``, a batch's output expiry), else
  ``created_at`` plus its tenant's file retention.
- Other tables age out by a registered ``Collector`` each (engine samples here; the lead wires delivered webhook
  rows): rows older than the collector's keep time go, a page at a time.

A job goes a page at a time (``delete_job_page``): at most ``limit`` items per transaction with their results,
document parts and tag edits, then its chunks, telemetry, batches and the job row. Each page first re-reads the job
row (locked ``FOR UPDATE`` on PostgreSQL) and stops if it is no longer due, so a retry that re-opened it wins. Every
count the dry run makes (``job_rows``, ``count_files``) uses the same rule as the deletes, so the two agree.

One janitor at a time across hosts: a lease row (``take_lease``), compare-and-set on the owner and expiry, the same
on SQLite and PostgreSQL. Keyword-only; no HTTP errors.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, Text, and_, cast, delete, exists, false, func, or_, select, update
from sqlalchemy.orm import Session

from vlbatch.db import webhooks
from vlbatch.db.models import (
    Batch,
    BatchStatus,
    Chunk,
    DeviceSample,
    DocumentPart,
    EngineSample,
    Item,
    Job,
    JobStatus,
    Result,
    StoredFile,
    TagEdit,
    utcnow,
)
from vlbatch.db.retention_tables import JanitorLease, TenantRetention
from vlbatch.db.webhook_tables import DeliveryStatus, WebhookDelivery
from vlbatch.settings import Settings

__all__ = [
    "COLLECTORS",
    "ENDED_JOB_STATES",
    "Collector",
    "Page",
    "Policy",
    "Retention",
    "Storage",
    "clear_retention",
    "count_files",
    "delete_files",
    "delete_job_page",
    "expired_files",
    "expired_job_ids",
    "file_expires_at",
    "job_expires_at",
    "job_rows",
    "list_retention",
    "policy",
    "register_collector",
    "register_job_hold",
    "release_lease",
    "set_retention",
    "storage_by_tenant",
    "take_lease",
]

ENDED_JOB_STATES = (JobStatus.FINISHED, JobStatus.CANCELLED)
_BATCH_ENDED = (BatchStatus.COMPLETED, BatchStatus.FAILED, BatchStatus.EXPIRED, BatchStatus.CANCELLED)
LEASE_NAME = "janitor"


# ------------------------------------------------------------------------------------------------- policy


@dataclass(frozen=True)
class Retention:
    """Seconds ended jobs and files are kept; 0: for ever."""

    jobs_s: int
    files_s: int


@dataclass(frozen=True)
class Policy:
    default: Retention
    tenants: dict[str, Retention] = field(default_factory=dict)  # tenants with a row of their own

    def of(self, tenant: str) -> Retention:
        return self.tenants.get(tenant, self.default)


def policy(session: Session, settings: Settings) -> Policy:
    """The settings' retention, each tenant's own row over it field by field."""
    default = Retention(jobs_s=settings.retention.retention_jobs_s, files_s=settings.retention.retention_files_s)
    tenants = {
        row.tenant: Retention(
            jobs_s=default.jobs_s if row.jobs_s is None else row.jobs_s,
            files_s=default.files_s if row.files_s is None else row.files_s,
        )
        for row in session.scalars(select(TenantRetention))
    }
    return Policy(default=default, tenants=tenants)


def set_retention(session: Session, *, tenant: str, jobs_s: int | None, files_s: int | None) -> TenantRetention:
    """A tenant's own retention (None: the default for that field; 0: for ever)."""
    row = session.get(TenantRetention, tenant)
    if row is None:
        row = TenantRetention(tenant=tenant)
        session.add(row)
    row.jobs_s, row.files_s, row.updated_at = jobs_s, files_s, utcnow()
    session.flush()
    return row


def clear_retention(session: Session, *, tenant: str) -> bool:
    res = session.execute(delete(TenantRetention).where(TenantRetention.tenant == tenant))
    return bool(res.rowcount)  # type: ignore[attr-defined]


def list_retention(session: Session) -> list[TenantRetention]:
    return list(session.scalars(select(TenantRetention).order_by(TenantRetention.tenant)))


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo else value.replace(tzinfo=UTC)  # SQLite gives naive UTC


def job_expires_at(job: Job, rules: Policy) -> datetime | None:
    """When the janitor may take the job: its own time, or (once it ended) its end plus its tenant's retention.
    None: not while it runs and nothing is set, or kept for ever."""
    if job.expires_at is not None:
        return _aware(job.expires_at)
    keep = rules.of(job.tenant).jobs_s
    if job.status not in ENDED_JOB_STATES or not keep:
        return None
    return _aware(job.finished_at or job.created_at) + timedelta(seconds=keep)


def file_expires_at(row: StoredFile, rules: Policy) -> datetime | None:
    if row.expires_at is not None:
        return _aware(row.expires_at)
    keep = rules.of(row.tenant).files_s
    return _aware(row.created_at) + timedelta(seconds=keep) if keep else None


# -------------------------------------------------------------------------------------- holds and collectors

JobHold = Callable[[], ColumnElement[bool]]
# Each returns a condition over ``Job`` that is true for a job that must be kept although it expired: below, "a
# delivery of this job's (or its batch's) event is still pending", so a job's results stay at least until its
# webhook was delivered or failed.
_JOB_HOLDS: list[JobHold] = []


def register_job_hold(hold: JobHold) -> None:
    _JOB_HOLDS.append(hold)


@dataclass(frozen=True)
class Collector:
    """A table whose rows age out on their own: ``delete_before(session, cutoff, limit)`` deletes at most ``limit``
    rows older than ``cutoff`` and returns how many; ``count_before(session, cutoff)`` counts them for the dry run
    (None: the dry run cannot say). ``keep_s(settings)``: how long rows are kept; 0 keeps them for ever."""

    table: str
    keep_s: Callable[[Settings], int]
    delete_before: Callable[[Session, datetime, int], int]
    count_before: Callable[[Session, datetime], int] | None = None


# Registered in this module (delivered webhook rows, engine samples), so every process that runs the janitor has
# them, whatever it imported. Without a ``count`` the dry run prints the table with "?".
COLLECTORS: list[Collector] = []


def register_collector(collector: Collector) -> None:
    COLLECTORS.append(collector)


def _engine_samples_before(session: Session, cutoff: datetime, limit: int) -> int:
    page = select(EngineSample.id).where(EngineSample.sampled_at < cutoff).limit(limit)
    res = session.execute(delete(EngineSample).where(EngineSample.id.in_(page)))
    return int(res.rowcount or 0)  # type: ignore[attr-defined]


def _count_engine_samples_before(session: Session, cutoff: datetime) -> int:
    return int(session.scalar(select(func.count()).where(EngineSample.sampled_at < cutoff)) or 0)


def _webhook_pending() -> ColumnElement[bool]:
    """A job whose event, or whose batch's event, is still to be delivered: its results stay until it is
    delivered or failed (a receiver told "completed" finds what it was told of)."""
    pending = WebhookDelivery.status == DeliveryStatus.PENDING
    of_job = exists(select(WebhookDelivery.id).where(WebhookDelivery.subject_id == Job.id, pending))
    of_batch = exists(
        select(WebhookDelivery.id)
        .join(Batch, Batch.id == WebhookDelivery.subject_id)
        .where(Batch.job_id == Job.id, pending)
    )
    return or_(of_job, of_batch)


register_job_hold(_webhook_pending)
register_collector(
    Collector(
        "webhook_deliveries",
        lambda s: s.retention.retention_webhook_deliveries_s,
        webhooks.delete_delivered_before,
        webhooks.count_delivered_before,
    )
)
register_collector(
    Collector(
        "engine_samples",
        lambda s: s.retention.retention_engine_samples_s,
        _engine_samples_before,
        _count_engine_samples_before,
    )
)


# ------------------------------------------------------------------------------------------------------ jobs


def _job_due(rules: Policy, now: datetime) -> ColumnElement[bool]:
    def aged(keep: int) -> ColumnElement[bool]:
        cutoff = now - timedelta(seconds=keep)
        ended_before = or_(Job.finished_at <= cutoff, and_(Job.finished_at.is_(None), Job.created_at <= cutoff))
        return and_(Job.expires_at.is_(None), ended_before)

    due: list[ColumnElement[bool]] = [Job.expires_at <= now]
    if rules.default.jobs_s:
        due.append(and_(Job.tenant.not_in(list(rules.tenants)), aged(rules.default.jobs_s)))
    due += [and_(Job.tenant == t, aged(r.jobs_s)) for t, r in rules.tenants.items() if r.jobs_s]
    batch_open = exists(select(Batch.id).where(Batch.job_id == Job.id, Batch.status.not_in(list(_BATCH_ENDED))))
    return and_(Job.status.in_(list(ENDED_JOB_STATES)), or_(*due), ~batch_open, *[~hold() for hold in _JOB_HOLDS])


def expired_job_ids(session: Session, *, rules: Policy, now: datetime, limit: int, after: str = "") -> list[str]:
    """Ids of jobs due for collection, in id order from after ``after``."""
    stmt = select(Job.id).where(_job_due(rules, now), Job.id > after).order_by(Job.id).limit(limit)
    return list(session.scalars(stmt))


def _result_size() -> ColumnElement[int]:
    """Characters of a result's answer (its raw text and its parsed output): what deleting it frees, near enough."""
    return func.coalesce(func.length(Result.raw_text), 0) + func.coalesce(func.length(cast(Result.output, Text)), 0)


def job_rows(session: Session, *, job_id: str) -> tuple[Counter[str], int]:
    """What deleting the job takes: rows per table and the results' bytes (``_result_size``)."""
    items = select(Item.id).where(Item.job_id == job_id)
    rows: Counter[str] = Counter()

    def count(table: str, stmt: object) -> None:
        rows[table] += int(session.scalar(stmt) or 0)  # type: ignore[call-overload]

    count("items", select(func.count()).select_from(Item).where(Item.job_id == job_id))
    count("results", select(func.count()).select_from(Result).where(Result.item_id.in_(items)))
    count("document_parts", select(func.count()).select_from(DocumentPart).where(DocumentPart.item_id.in_(items)))
    count("tag_edits", select(func.count()).select_from(TagEdit).where(TagEdit.item_id.in_(items)))
    count("chunks", select(func.count()).select_from(Chunk).where(Chunk.job_id == job_id))
    count("device_telemetry", select(func.count()).select_from(DeviceSample).where(DeviceSample.job_id == job_id))
    count("batches", select(func.count()).select_from(Batch).where(Batch.job_id == job_id))
    rows["jobs"] += 1
    size = int(session.scalar(select(func.coalesce(func.sum(_result_size()), 0)).where(Result.item_id.in_(items))) or 0)
    return +rows, size


@dataclass
class Page:
    """What one transaction of ``delete_job_page`` deleted; ``done``: the job row went too."""

    rows: Counter[str] = field(default_factory=Counter)
    bytes: int = 0
    done: bool = False
    skipped: bool = False  # the job is no longer due (re-opened, or held): nothing was deleted


def _deleted(session: Session, stmt: object) -> int:
    return int(session.execute(stmt).rowcount or 0)  # type: ignore[call-overload]


def delete_job_page(session: Session, *, job_id: str, rules: Policy, now: datetime, limit: int) -> Page:
    """Delete up to ``limit`` of the job's items (with their results, document parts and tag edits); once none is
    left, up to ``limit`` chunks and telemetry rows; once those are gone too, its batches and the job row. The
    caller commits: one call, one short transaction."""
    page = Page()
    if session.scalar(select(Job.id).where(Job.id == job_id, _job_due(rules, now)).with_for_update()) is None:
        page.skipped = True
        return page
    ids = list(session.scalars(select(Item.id).where(Item.job_id == job_id).limit(limit)))
    if ids:
        # each deleted result's size comes back with the delete: no second read of the page
        sizes = list(session.scalars(delete(Result).where(Result.item_id.in_(ids)).returning(_result_size())))
        page.rows["results"] += len(sizes)
        page.bytes = sum(int(n or 0) for n in sizes)
        page.rows["document_parts"] += _deleted(session, delete(DocumentPart).where(DocumentPart.item_id.in_(ids)))
        page.rows["tag_edits"] += _deleted(session, delete(TagEdit).where(TagEdit.item_id.in_(ids)))
        page.rows["items"] += _deleted(session, delete(Item).where(Item.id.in_(ids)))
        if len(ids) >= limit:
            page.rows = +page.rows
            return page
    for table, model, column in (
        ("chunks", Chunk, Chunk.job_id),
        ("device_telemetry", DeviceSample, DeviceSample.job_id),
    ):
        some = select(model.id).where(column == job_id).limit(limit)
        n = _deleted(session, delete(model).where(model.id.in_(some)))
        page.rows[table] += n
        if n >= limit:
            page.rows = +page.rows
            return page
    page.rows["batches"] += _deleted(session, delete(Batch).where(Batch.job_id == job_id))
    page.rows["jobs"] += _deleted(session, delete(Job).where(Job.id == job_id))
    page.done = True
    page.rows = +page.rows
    return page


# ----------------------------------------------------------------------------------------------------- files


def _file_due(rules: Policy, now: datetime) -> ColumnElement[bool]:
    def aged(keep: int) -> ColumnElement[bool]:
        return and_(StoredFile.expires_at.is_(None), StoredFile.created_at <= now - timedelta(seconds=keep))

    due: list[ColumnElement[bool]] = [StoredFile.expires_at <= now]
    if rules.default.files_s:
        due.append(and_(StoredFile.tenant.not_in(list(rules.tenants)), aged(rules.default.files_s)))
    due += [and_(StoredFile.tenant == t, aged(r.files_s)) for t, r in rules.tenants.items() if r.files_s]
    return or_(*due) if due else false()


def count_files(session: Session, *, rules: Policy, now: datetime) -> tuple[int, int]:
    """(files, bytes) due for collection."""
    n, size = session.execute(
        select(func.count(StoredFile.id), func.coalesce(func.sum(StoredFile.bytes), 0)).where(_file_due(rules, now))
    ).one()
    return int(n), int(size)


def expired_files(session: Session, *, rules: Policy, now: datetime, limit: int) -> list[str]:
    return list(
        session.scalars(select(StoredFile.id).where(_file_due(rules, now)).order_by(StoredFile.id).limit(limit))
    )


def delete_files(session: Session, *, ids: list[str], rules: Policy, now: datetime) -> list[tuple[str, int]]:
    """Delete the rows of those files still due; (stored_as, bytes) of each, for the caller to drop the bytes of
    once committed."""
    res = session.execute(
        delete(StoredFile)
        .where(StoredFile.id.in_(ids), _file_due(rules, now))
        .returning(StoredFile.stored_as, StoredFile.bytes)
    )
    return [(name, int(size)) for name, size in res]


# ----------------------------------------------------------------------------------------------------- lease


def take_lease(session: Session, *, owner: str, now: datetime, ttl: timedelta) -> bool:
    """Take (or renew) the janitor's lease until ``now + ttl``: True when ``owner`` holds it. Commits."""
    if session.get(JanitorLease, LEASE_NAME) is None:
        from sqlalchemy.dialects import postgresql, sqlite

        module: Any = postgresql if session.get_bind().dialect.name == "postgresql" else sqlite
        # Two hosts making the row at once: one insert wins, the other does nothing; the update below decides.
        session.execute(module.insert(JanitorLease).values(name=LEASE_NAME).on_conflict_do_nothing())
    res = session.execute(
        update(JanitorLease)
        .where(
            JanitorLease.name == LEASE_NAME,
            or_(JanitorLease.owner.is_(None), JanitorLease.owner == owner, JanitorLease.expires_at <= now),
        )
        .values(owner=owner, expires_at=now + ttl)
    )
    session.commit()
    return bool(res.rowcount)  # type: ignore[attr-defined]


def release_lease(session: Session, *, owner: str) -> None:
    session.execute(
        update(JanitorLease)
        .where(JanitorLease.name == LEASE_NAME, JanitorLease.owner == owner)
        .values(owner=None, expires_at=None)
    )
    session.commit()


# --------------------------------------------------------------------------------------------------- metrics


@dataclass(frozen=True)
class Storage:
    """A tenant's rows and bytes: jobs, their items (``jobs.total``), files and the files' bytes."""

    tenant: str
    jobs: int = 0
    items: int = 0
    files: int = 0
    file_bytes: int = 0


def storage_by_tenant(session: Session) -> list[Storage]:
    """Per tenant, from the jobs and files tables alone (no scan of items or results)."""
    jobs = {
        t: (int(n), int(items or 0))
        for t, n, items in session.execute(select(Job.tenant, func.count(), func.sum(Job.total)).group_by(Job.tenant))
    }
    files = {
        t: (int(n), int(size or 0))
        for t, n, size in session.execute(
            select(StoredFile.tenant, func.count(), func.sum(StoredFile.bytes)).group_by(StoredFile.tenant)
        )
    }
    return [Storage(t, *jobs.get(t, (0, 0)), *files.get(t, (0, 0))) for t in sorted(set(jobs) | set(files))]

"""Rows of job templates (recurring document jobs) and of the inbox files they have queued.

Plain CRUD with keyword-only arguments: values arrive checked. What a template may hold (its cron, its
pipeline's options, its folders) and when it is due are decided above the core, in ``worker.template_schedule``,
because that needs the pipeline registry and Celery's cron parser.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from vlbatch.db.models import DEFAULT_TENANT, InboxFile, JobTemplate, utcnow


def as_utc(dt: datetime) -> datetime:
    """``dt`` as an aware UTC datetime: SQLite hands back naive datetimes for DateTime(timezone=True) columns,
    and only UTC is ever stored."""
    return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)


def add_template(
    session: Session,
    *,
    name: str,
    inbox: str,
    pipeline: str,
    model: str,
    options: Mapping[str, Any],
    cron: str,
    output_dir: str | None,
    tenant: str = DEFAULT_TENANT,
) -> JobTemplate | None:
    """Add a template (flushed, not committed); None when the name is taken, also by a concurrent add that
    won the race (the session is rolled back then)."""
    if get_template_by_name(session, name=name) is not None:
        return None
    template = JobTemplate(
        name=name,
        tenant=tenant,
        inbox=inbox,
        pipeline=pipeline,
        model=model,
        options=dict(options),
        cron=cron,
        output_dir=output_dir,
    )
    session.add(template)
    try:
        session.flush()
    except IntegrityError:
        session.rollback()
        return None
    return template


def get_template_by_name(session: Session, *, name: str) -> JobTemplate | None:
    return session.scalars(select(JobTemplate).where(JobTemplate.name == name)).first()


def list_templates(session: Session) -> list[JobTemplate]:
    return list(session.scalars(select(JobTemplate).order_by(JobTemplate.name)))


def enabled_templates(session: Session) -> list[JobTemplate]:
    """Enabled templates in name order."""
    return list(session.scalars(select(JobTemplate).where(JobTemplate.enabled.is_(True)).order_by(JobTemplate.name)))


def claim_run(session: Session, *, template_id: int, seen_last_run_at: datetime | None, now: datetime) -> bool:
    """Set ``last_run_at`` to ``now`` only if it still holds the value the caller saw (compare-and-set).

    False means another run of the same template got there first: a second scheduler, or a manual run
    racing the nightly one. The caller then queues nothing, so no file is queued twice.
    """
    stmt = update(JobTemplate).where(JobTemplate.id == template_id).values(last_run_at=as_utc(now))
    if seen_last_run_at is None:
        stmt = stmt.where(JobTemplate.last_run_at.is_(None))
    else:
        stmt = stmt.where(JobTemplate.last_run_at == seen_last_run_at)
    res = session.execute(stmt)
    return bool(res.rowcount)  # type: ignore[attr-defined]


def known_hashes(session: Session, *, template_id: int) -> dict[str, str]:
    """Path -> content hash of every inbox file this template has queued before."""
    stmt = select(InboxFile.path, InboxFile.content_hash).where(InboxFile.template_id == template_id)
    return {path: digest for path, digest in session.execute(stmt).tuples()}


def record_files(session: Session, *, template_id: int, files: Mapping[str, str], job_id: str | None) -> None:
    """Upsert (template, path) -> hash and the job that took the file, so the next run skips it."""
    if not files:
        return
    dialect = session.get_bind().dialect.name
    insert_fn: Any = postgresql.insert if dialect == "postgresql" else sqlite.insert
    now = utcnow()
    rows = [
        {"template_id": template_id, "path": p, "content_hash": digest, "job_id": job_id, "seen_at": now}
        for p, digest in files.items()
    ]
    stmt = insert_fn(InboxFile)
    stmt = stmt.on_conflict_do_update(
        index_elements=["template_id", "path"],
        set_={
            "content_hash": stmt.excluded.content_hash,
            "job_id": stmt.excluded.job_id,
            "seen_at": stmt.excluded.seen_at,
        },
    )
    batch = 5_000
    for start in range(0, len(rows), batch):
        session.execute(stmt, rows[start : start + batch])

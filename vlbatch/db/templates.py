"""CRUD over job templates (recurring document jobs) and the inbox files they have queued.

Keyword-only arguments; no HTTP errors. Every bad value raises ``TemplateError`` (a ``ValueError``) whose
message names the value and the fix, so the CLI and an API route can show it as it is.

Cron strings are five fields, ``minute hour day-of-month month day-of-week``, read in UTC and parsed by
Celery's ``crontab``. As in Celery (and unlike Vixie cron), a day must match *both* day-of-month and
day-of-week when both are restricted.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from celery import Celery
from celery.schedules import ParseException, crontab
from pydantic import ValidationError
from sqlalchemy import select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from pipelines import registry
from pipelines.base import PipelineKind
from vlbatch.db.models import InboxFile, JobTemplate, utcnow
from vlbatch.inputs import InputRootError, confine

log = logging.getLogger(__name__)

# crontab reads its timezone from an app; a private one pinned to UTC keeps due-ness independent of
# whichever Celery app happens to be current in this process.
_CRON_APP = Celery("vlbatch-cron", set_as_current=False)
_CRON_APP.conf.update(timezone="UTC", enable_utc=True)


class TemplateError(ValueError):
    """A template that cannot be created or run as given (bad cron, options, folder or name)."""


def parse_cron(expr: str) -> crontab:
    """A five-field cron string as a UTC ``crontab``; TemplateError naming the field format otherwise."""
    fields = expr.split()
    if len(fields) != 5:
        raise TemplateError(
            f"cron {expr!r} has {len(fields)} fields; give five: minute hour day-of-month month day-of-week,"
            " e.g. '0 2 * * *' for 02:00 UTC every day"
        )
    minute, hour, day_of_month, month_of_year, day_of_week = fields
    try:
        return crontab(
            minute=minute,
            hour=hour,
            day_of_month=day_of_month,
            month_of_year=month_of_year,
            day_of_week=day_of_week,
            app=_CRON_APP,
        )
    except (ValueError, ParseException) as exc:
        msg = f"cron {expr!r} is not valid: {exc} (fields: minute hour day-of-month month day-of-week)"
        raise TemplateError(msg) from None


def _aware(dt: datetime) -> datetime:
    # SQLite hands back naive datetimes for DateTime(timezone=True) columns; we only ever store UTC.
    return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)


def next_run_at(cron: str, *, after: datetime) -> datetime:
    """The first time strictly after ``after`` at which ``cron`` fires (UTC, minute resolution)."""
    # remaining_delta gives the calendar step from ``after`` to the next match; adding it is what
    # crontab.is_due does internally, without its dependency on the wall clock.
    start, delta, _now = parse_cron(cron).remaining_delta(_aware(after), tz=UTC)
    nxt: datetime = start + delta
    return nxt.astimezone(UTC)


def is_due(template: JobTemplate, *, now: datetime) -> bool:
    """Enabled, and a cron time has passed since the last run (or since the template was made)."""
    if not template.enabled:
        return False
    since = template.last_run_at or template.created_at
    return next_run_at(template.cron, after=since) <= _aware(now)


def validate_options(pipeline: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """The pipeline's options checked by its own pydantic model, with defaults filled in (as stored by the API)."""
    known = registry.names(PipelineKind.DOCUMENT)  # templates take inbox documents
    if pipeline not in known:
        raise TemplateError(f"unknown pipeline {pipeline!r}; templates run one of {', '.join(known)}")
    try:
        opts = registry.get(pipeline).options(dict(options))
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'options'}: {e['msg']}" for e in exc.errors())
        raise TemplateError(f"bad {pipeline} options: {problems}") from None
    dumped: dict[str, Any] = opts.model_dump(mode="json")
    return dumped


def _inside_roots(path: str, roots: list[Path], *, what: str) -> Path:
    resolved = Path(path).resolve()
    if any(resolved.is_relative_to(r.resolve()) for r in roots):
        return resolved
    allowed = ", ".join(str(r) for r in roots) or "none configured (set VLBATCH_ALLOWED_INPUT_ROOTS)"
    raise TemplateError(f"{what} '{path}' is outside the allowed input roots ({allowed})")


def create_template(
    session: Session,
    *,
    name: str,
    inbox: str,
    pipeline: str,
    model: str,
    options: Mapping[str, Any],
    cron: str,
    output_dir: str | None,
    allowed_roots: list[Path],
) -> JobTemplate:
    """Validate and add a template (flushed, not committed). Paths are stored resolved, because the
    scheduler and the workers do not share the caller's working directory.
    """
    name = name.strip()
    if not name:
        raise TemplateError("template name is empty")
    if not model.strip():
        raise TemplateError("model name is empty")
    if get_template_by_name(session, name=name) is not None:
        raise TemplateError(f"a template named {name!r} exists already; pick another name")
    parse_cron(cron)
    stored_options = validate_options(pipeline, options)
    try:
        inbox_dir = confine(inbox, allowed_roots)
    except InputRootError as exc:
        raise TemplateError(f"inbox: {exc}") from None
    out = str(_inside_roots(output_dir, allowed_roots, what="output folder")) if output_dir else None
    template = JobTemplate(
        name=name,
        inbox=str(inbox_dir),
        pipeline=pipeline,
        model=model.strip(),
        options=stored_options,
        cron=" ".join(cron.split()),
        output_dir=out,
    )
    session.add(template)
    try:
        session.flush()
    except IntegrityError as exc:  # a concurrent add of the same name won the race
        session.rollback()
        raise TemplateError(f"a template named {name!r} exists already; pick another name") from exc
    log.info("template %s (id %s) added: %s over %s, cron %r", name, template.id, pipeline, template.inbox, cron)
    return template


def get_template_by_name(session: Session, *, name: str) -> JobTemplate | None:
    return session.scalars(select(JobTemplate).where(JobTemplate.name == name)).first()


def list_templates(session: Session) -> list[JobTemplate]:
    return list(session.scalars(select(JobTemplate).order_by(JobTemplate.name)))


def due_templates(session: Session, *, now: datetime) -> list[JobTemplate]:
    """Enabled templates whose cron has fired since their last run (or creation), in name order.

    A template whose stored cron no longer parses is logged and left out, so it cannot stop the others.
    """
    due = []
    for t in session.scalars(select(JobTemplate).where(JobTemplate.enabled.is_(True)).order_by(JobTemplate.name)):
        try:
            if is_due(t, now=now):
                due.append(t)
        except TemplateError:
            log.exception("template %s (id %s): stored cron %r is invalid; skipped", t.name, t.id, t.cron)
    return due


def claim_run(session: Session, *, template_id: int, seen_last_run_at: datetime | None, now: datetime) -> bool:
    """Set ``last_run_at`` to ``now`` only if it still holds the value the caller saw (compare-and-set).

    False means another run of the same template got there first: a second scheduler, or a manual run
    racing the nightly one. The caller then queues nothing, so no file is queued twice.
    """
    stmt = update(JobTemplate).where(JobTemplate.id == template_id).values(last_run_at=_aware(now))
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


def changed_files(session: Session, *, template: JobTemplate, files: Mapping[str, str]) -> list[str]:
    """The paths in ``files`` (path -> content hash) that are new to the template or whose hash differs."""
    known = known_hashes(session, template_id=template.id)
    return sorted(p for p, digest in files.items() if known.get(p) != digest)


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

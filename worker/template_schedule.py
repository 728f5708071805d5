"""Job templates as the scheduler sees them: what a template may hold and when it is due.

The rows live in ``vlbatch.db.job_templates``; this module checks a new template against the pipeline registry
and the allowed input roots before it is stored, and reads the cron. Every bad value raises
``TemplateError`` (code ``invalid_template``) whose message names the value and the fix, so the CLI can show it
as it is.

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
from sqlalchemy.orm import Session

from pipelines import registry
from pipelines.base import PipelineKind
from vlbatch.db import job_templates as rows
from vlbatch.db.models import DEFAULT_TENANT, JobTemplate
from vlbatch.errors import INVALID_TEMPLATE, VlbatchError
from vlbatch.paths import PathRefused, confined

log = logging.getLogger(__name__)

# crontab reads its timezone from an app; a private one pinned to UTC keeps due-ness independent of
# whichever Celery app happens to be current in this process.
_CRON_APP = Celery("vlbatch-cron", set_as_current=False)
_CRON_APP.conf.update(timezone="UTC", enable_utc=True)


class TemplateError(VlbatchError):
    """A template that cannot be created or run as given (bad cron, options, folder or name)."""

    code = INVALID_TEMPLATE


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


def next_run_at(cron: str, *, after: datetime) -> datetime:
    """The first time strictly after ``after`` at which ``cron`` fires (UTC, minute resolution)."""
    # remaining_delta gives the calendar step from ``after`` to the next match; adding it is what
    # crontab.is_due does internally, without its dependency on the wall clock.
    start, delta, _now = parse_cron(cron).remaining_delta(rows.as_utc(after), tz=UTC)
    nxt: datetime = start + delta
    return nxt.astimezone(UTC)


def is_due(template: JobTemplate, *, now: datetime) -> bool:
    """Enabled, and a cron time has passed since the last run (or since the template was made)."""
    if not template.enabled:
        return False
    since = template.last_run_at or template.created_at
    return next_run_at(template.cron, after=since) <= rows.as_utc(now)


def due_templates(session: Session, *, now: datetime) -> list[JobTemplate]:
    """Enabled templates whose cron has fired since their last run (or creation), in name order.

    A template whose stored cron no longer parses is logged and left out, so it cannot stop the others.
    """
    due = []
    for t in rows.enabled_templates(session):
        try:
            if is_due(t, now=now):
                due.append(t)
        except TemplateError:
            log.exception("template %s (id %s): stored cron %r is invalid; skipped", t.name, t.id, t.cron)
    return due


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
    tenant: str = DEFAULT_TENANT,
    output_roots: list[Path] | None = None,
) -> JobTemplate:
    """Validate and add a template (flushed, not committed). Paths are stored resolved, because the
    scheduler and the workers do not share the caller's working directory. The inbox lies inside
    ``allowed_roots``, the output folder inside ``output_roots`` (None: the same roots).
    """
    name = name.strip()
    if not name:
        raise TemplateError("template name is empty")
    if not model.strip():
        raise TemplateError("model name is empty")
    taken = TemplateError(f"a template named {name!r} exists already; pick another name")
    if rows.get_template_by_name(session, name=name) is not None:
        raise taken
    parse_cron(cron)
    stored_options = validate_options(pipeline, options)
    try:
        inbox_dir = confined(inbox, allowed_roots, must_exist=True, kind="dir")
    except PathRefused as exc:
        raise TemplateError(f"inbox: {exc}") from None
    writable = allowed_roots if output_roots is None else output_roots
    try:
        out = str(confined(output_dir, writable, kind="dir")) if output_dir else None
    except PathRefused as exc:
        raise TemplateError(f"output folder {exc}") from None
    template = rows.add_template(
        session,
        name=name,
        inbox=str(inbox_dir),
        pipeline=pipeline,
        model=model.strip(),
        options=stored_options,
        cron=" ".join(cron.split()),
        output_dir=out,
        tenant=tenant,
    )
    if template is None:  # a concurrent add of the same name won the race
        raise taken
    log.info("template %s (id %s) added: %s over %s, cron %r", name, template.id, pipeline, template.inbox, cron)
    return template

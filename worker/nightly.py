"""The nightly schedule: each job template's inbox is scanned on its cron, and new or changed documents
become one job.

``run_template`` hashes the supported files under a template's inbox, queues only those whose hash is new
to the template, records the hashes with the job id and sets ``last_run_at``, all in one transaction, and
hands the chunk ids to the broker after that commit. The job is made and started as any other job
(``jobs.submit``: the tenant's quotas, the chunks marked sent in the commit, then published). If the broker
is down the job still exists and the reconciler sends it later (invariant 1); the hashes are recorded at
queue time, so a file is never queued twice for the same content. A run the tenant's quotas refuse stores
nothing, its claim included: the template runs again at the next tick.

The scheduler is one Celery worker with embedded beat (``main``): ``worker -B -Q vlbatch.control
--pool=solo``. Run exactly one per cluster. A second one would not queue a file twice (each run claims
the template with a compare-and-set on ``last_run_at``), but it would scan every inbox twice.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from celery import Celery
from sqlalchemy.orm import Session, sessionmaker

from jobs.refusals import JobRefused
from jobs.request import JobRequest
from jobs.submit import insert, start
from preprocessing.documents import detect_format, hash_file
from preprocessing.input_errors import InputError
from vlbatch.db import job_store, tenants
from vlbatch.db import job_templates as template_rows
from vlbatch.db.models import JobTemplate, utcnow
from vlbatch.paths import PathRefused, confined, inside
from vlbatch.settings import Settings
from worker.template_schedule import TemplateError, due_templates

log = logging.getLogger(__name__)

RUN_DUE = "vlbatch.run_due_templates"
CONTROL_QUEUE = "vlbatch.control"
PRIORITY = "documents"
TICK_SECONDS = 60.0


@dataclass(frozen=True)
class RunResult:
    """One template run: the job it queued (None when nothing was new or changed) and the file counts."""

    job_id: str | None
    new: int
    changed: int
    unchanged: int
    published: bool = False  # False with a job: the broker was down, the reconciler sends it
    skipped: bool = False  # another run of the same template claimed it first; nothing was queued


def _skip_name(rel: Path) -> bool:
    # Hidden files/folders and Office owner files (``~$report.docx``, written while a file is open in
    # Word) carry a supported suffix but are not documents.
    return any(part.startswith((".", "~$")) for part in rel.parts)


def iter_documents(folder: Path, *, roots: list[Path]) -> Iterator[Path]:
    """Supported document files below ``folder`` (recursively, name order), as resolved paths inside ``roots``."""
    for p in sorted(folder.rglob("*")):
        if _skip_name(p.relative_to(folder)) or not p.is_file():
            continue
        try:
            detect_format(p.name)
        except InputError:
            continue  # unsupported suffix: an inbox also holds spreadsheets, images, notes
        real = p.resolve()
        if inside(real, roots):  # a symlink may lead out of the roots
            yield real


def scan_inbox(folder: Path, *, roots: list[Path]) -> dict[str, str]:
    """Path -> sha256 of every supported document under ``folder``; a file that vanishes mid-scan is left out."""
    files: dict[str, str] = {}
    for p in iter_documents(folder, roots=roots):
        try:
            files[str(p)] = hash_file(p)
        except OSError as exc:  # moved or deleted between listing and reading; the next run sees it again
            log.warning("inbox %s: cannot read %s, skipped: %s", folder, p, exc)
    return files


def run_template(
    settings: Settings,
    sessions: sessionmaker[Session],
    template_name: str,
    *,
    now: datetime | None = None,
    publish: bool = True,
) -> RunResult:
    """Run one template now, whatever its cron says; TemplateError if it is missing or its inbox is not allowed."""
    with sessions() as s:
        template = template_rows.get_template_by_name(s, name=template_name)
        if template is None:
            raise TemplateError(f"no template named {template_name!r} (see `vlbatch templates list`)")
    return _run(settings, sessions, template, now=now or utcnow(), publish=publish)


def _run(
    settings: Settings, sessions: sessionmaker[Session], template: JobTemplate, *, now: datetime, publish: bool
) -> RunResult:
    seen_last_run = template.last_run_at
    with sessions() as s:  # the inbox is read inside the roots of the tenant the jobs belong to
        roots = tenants.roots_of(s, settings, template.tenant).inputs
    try:
        folder = confined(template.inbox, roots, must_exist=True, kind="dir")
    except PathRefused as exc:
        raise TemplateError(f"template {template.name!r}: inbox {exc}") from None
    # Hash outside the transaction: reading a large inbox can take minutes, and SQLite would hold its
    # write lock (blocking every worker's result) for as long as the transaction is open.
    files = scan_inbox(folder, roots=roots)
    with sessions() as s:
        known = template_rows.known_hashes(s, template_id=template.id)
        new = sorted(p for p in files if p not in known)
        changed = sorted(p for p in files if p in known and known[p] != files[p])
        unchanged = len(files) - len(new) - len(changed)
        if not template_rows.claim_run(s, template_id=template.id, seen_last_run_at=seen_last_run, now=now):
            s.rollback()
            log.info("template %s (id %s): another run claimed it first; nothing queued", template.name, template.id)
            return RunResult(None, len(new), len(changed), unchanged, skipped=True)
        todo = sorted(new + changed)
        if not todo:
            s.commit()
            log.info("template %s (id %s): %d files, none new or changed", template.name, template.id, unchanged)
            return RunResult(None, 0, 0, unchanged)
        request = JobRequest(
            pipeline=template.pipeline,
            model=template.model,
            options=template.options,
            items=[job_store.NewItem(inputs={"path": p}, ref=p) for p in todo],
            priority=PRIORITY,
            tenant=template.tenant,
            output_dir=template.output_dir,
        )
        job = insert(s, settings, request)  # a refusal rolls back the claim too: the next tick tries again
        template_rows.record_files(s, template_id=template.id, files={p: files[p] for p in todo}, job_id=job.id)
        published = start(s, settings, job, publish=publish)
        job_id = job.id
        log.info(
            "template %s (id %s): job %s over %d new and %d changed files (%d unchanged)",
            template.name,
            template.id,
            job_id,
            len(new),
            len(changed),
            unchanged,
        )
    return RunResult(job_id, len(new), len(changed), unchanged, published=published)


def run_due(settings: Settings, sessions: sessionmaker[Session], *, now: datetime) -> dict[str, RunResult]:
    """Run every template due at ``now``; one that fails is logged and the others still run."""
    with sessions() as s:
        due = due_templates(s, now=now)
    results: dict[str, RunResult] = {}
    for template in due:
        try:
            results[template.name] = _run(settings, sessions, template, now=now, publish=True)
        except JobRefused as exc:  # over the tenant's quota: nothing stored, tried again at the next tick
            log.warning("template %s (id %s): refused: %s", template.name, template.id, exc.message)
        except Exception:  # a bad inbox, a full disk, a DB hiccup: tomorrow's other templates must still run
            log.exception("template %s (id %s): nightly run failed", template.name, template.id)
    return results


def make_beat_app(settings: Settings, *, sessions: sessionmaker[Session] | None = None) -> Celery:
    """The scheduler app: beat sends ``vlbatch.run_due_templates`` to ``vlbatch.control`` every minute.

    A separate app rather than ``jobs.publisher.celery_app``: that one is cached per broker URL and shared
    with the engine worker, which sets its own default queue on it.
    """
    app = Celery("vlbatch-nightly", broker=settings.broker.broker_url, set_as_current=False)
    app.conf.update(
        timezone="UTC",
        enable_utc=True,
        task_ignore_result=True,
        task_default_queue=CONTROL_QUEUE,
        broker_connection_retry_on_startup=True,
        # Due-ness lives in the DB (last_run_at), so beat needs no schedule file of its own.
        beat_scheduler="celery.beat:Scheduler",
        beat_schedule={
            "run-due-templates": {
                "task": RUN_DUE,
                "schedule": TICK_SECONDS,
                # A tick that waited longer than the next one is worthless; the next tick does the same work.
                "options": {"queue": CONTROL_QUEUE, "expires": TICK_SECONDS - 5},
            }
        },
    )
    holder: dict[str, sessionmaker[Session]] = {"sessions": sessions} if sessions is not None else {}

    # shared=False: a shared task is copied into every Celery app made later in this process, and the
    # first registration wins, so a second app (a test, a re-created scheduler) would run stale settings.
    @app.task(name=RUN_DUE, ignore_result=True, shared=False)
    def run_due_templates() -> int:
        if "sessions" not in holder:  # built once per process, on the first tick
            from vlbatch.db.session import make_engine, make_sessionmaker

            holder["sessions"] = make_sessionmaker(make_engine(settings.database.database_url))
        results = run_due(settings, holder["sessions"], now=utcnow())
        return sum(1 for r in results.values() if r.job_id)

    return app


def open_sessions(settings: Settings) -> sessionmaker[Session]:
    """Migrate the database and build a session factory, for a short CLI command (the process exit closes it)."""
    from vlbatch.db.session import make_engine, make_sessionmaker, migrate

    migrate(settings.database.database_url)
    return make_sessionmaker(make_engine(settings.database.database_url))


def main(settings: Settings | None = None) -> None:
    """Run the scheduler: one process per cluster (beat must not run twice), solo pool, control queue only."""
    from vlbatch.db.session import make_engine, make_sessionmaker, migrate
    from vlbatch.settings import get_settings

    settings = settings or get_settings()
    migrate(settings.database.database_url)
    engine = make_engine(settings.database.database_url)
    app = make_beat_app(settings, sessions=make_sessionmaker(engine))
    try:
        app.worker_main(
            [
                "worker",
                "-B",
                "-Q",
                CONTROL_QUEUE,
                "--pool=solo",
                "--concurrency=1",
                "--loglevel=INFO",
                "--without-gossip",
                "--without-mingle",
                "-n",
                "vlbatch-scheduler@%h",
            ]
        )
    finally:
        engine.dispose()

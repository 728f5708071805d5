"""OpenAI-compatible batches: make a batch from an uploaded file, and move it along its statuses.

Creating reads the input file a line at a time: each line is checked (``pipelines.openai_batch.check_line``)
and inserted as an item of the batch's job (``jobs.submit.insert``, ``start``), a bad line as an item failed with
its code and line number, so one bad line never costs the others. The job then runs on the ordinary queue and
workers. A batch moves on when it is read: once its job has no open item (or its completion window is over, or it
was cancelled) the one reader that wins the move to ``finalizing`` writes the output and error files, streamed from
the results table a page at a time, and the batch ends ``completed``, ``expired`` or ``cancelled``.

Each function takes the caller's tenant or scope and plain values and returns the ``Batch`` row; a refusal is a
``JobRefused`` with its registered code (the API answers it with the code's status, ``api.http_errors``). Showing a
batch is the API's (``api.batch_views``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy.orm import Session

from jobs import expiry
from jobs.estimate import LISTED_ITEMS, Estimate, dry_run_slot
from jobs.exports.batch_output import batch_lines
from jobs.refusals import JobRefused
from jobs.request import JobRequest
from jobs.submit import dry_run, insert, start
from pipelines import registry
from pipelines.base import RequestPipeline
from pipelines.chat import RequestOptions
from pipelines.openai_batch import CheckedLine, LineChecker
from vlbatch.db import batches, job_store, results
from vlbatch.db.filestore import FileStore, LineTooLong, Writer
from vlbatch.db.models import Batch, BatchStatus, Job, StoredFile, utcnow
from vlbatch.errors import (
    BATCH_FINISHED,
    BATCH_NOT_FOUND,
    FILE_NOT_FOUND,
    INVALID_BATCH,
    NO_MODEL,
    TOO_MANY_BATCH_LINES,
)
from vlbatch.settings import Settings

log = logging.getLogger(__name__)

MAX_WINDOW = timedelta(hours=24)
_UNITS = {"s": 1, "m": 60, "h": 3600}


@dataclass(frozen=True)
class NewBatch:
    """What a batch is made of: the uploaded input file, the endpoint its lines call, how long it may run
    (``completion_window``: a number and ``s``, ``m`` or ``h``, at most 24h), the caller's metadata and the
    request options every line runs with (None: the defaults)."""

    input_file_id: str
    endpoint: str
    completion_window: str = "24h"
    metadata: dict[str, str] | None = None
    options: RequestOptions | None = None
    output_expires_after: dict[str, object] | None = None  # OpenAI's shape, checked by ``jobs.expiry``


def store(settings: Settings) -> FileStore:
    """Where uploaded files and a batch's output and error files keep their bytes."""
    return FileStore(settings.uploads.data_dir / "files")


def found_file(session: Session, *, scope: str | None, file_id: str) -> StoredFile:
    """The file, if ``scope`` (a tenant, or None for an admin) may see it; another tenant's is missing."""
    row = batches.get_file(session, scope=scope, file_id=file_id)
    if row is None:
        raise JobRefused(FILE_NOT_FOUND, f"file '{file_id}' not found")
    return row


def found_batch(session: Session, *, scope: str | None, batch_id: str) -> Batch:
    """The batch, if ``scope`` (a tenant, or None for an admin) may see it; another tenant's is missing."""
    row = batches.get_batch(session, scope=scope, batch_id=batch_id)
    if row is None:
        raise JobRefused(BATCH_NOT_FOUND, f"batch '{batch_id}' not found")
    return row


def _window(text: str) -> timedelta:
    # Compared as a number of seconds first: a window of 10^20 hours is no timedelta at all (OverflowError).
    seconds = int(text[:-1]) * _UNITS[text[-1]]
    if seconds > MAX_WINDOW.total_seconds():
        raise JobRefused(INVALID_BATCH, f"completion_window '{text}' is longer than 24h")
    return timedelta(seconds=seconds)


def _pipeline(endpoint: str) -> RequestPipeline:
    try:
        return registry.request_pipeline(endpoint)
    except registry.UnknownPipeline as exc:
        raise JobRefused(INVALID_BATCH, f"endpoint '{endpoint}' is not served: {exc}") from exc


def _line_item(checked: CheckedLine, size: int) -> batches.LineItem:
    if checked.code is not None:
        return batches.LineItem(checked.custom_id, {"line": checked.line}, checked.code, checked.message)
    return batches.LineItem(checked.custom_id, {"line": checked.line, "body": checked.body}, size=size)


def _request_lines(fs: FileStore, source: StoredFile, settings: Settings) -> int:
    """The items the batch's job will have: one per line that is not blank (``LineChecker.check``), at most
    ``VLBATCH_MAX_BATCH_LINES``."""
    n = sum(1 for raw in fs.lines(source.stored_as, max_bytes=settings.uploads.max_batch_line_bytes) if raw.strip())
    if n > settings.uploads.max_batch_lines:
        raise JobRefused(
            TOO_MANY_BATCH_LINES,
            f"file '{source.id}' holds {n} request lines; a batch takes at most {settings.uploads.max_batch_lines} "
            "(VLBATCH_MAX_BATCH_LINES)",
        )
    return n


@dataclass(frozen=True)
class _Checked:
    """A batch request that passed what ``create`` and its dry run both check before any row is written."""

    source: StoredFile
    pipeline: RequestPipeline
    window: timedelta
    options: RequestOptions
    line_count: int
    checker: LineChecker
    fs: FileStore
    max_line_bytes: int

    def lines(self) -> Iterator[tuple[CheckedLine, int]]:
        """The input file's lines, each checked and with its size in bytes, one at a time (the checker counts the
        valid ones and learns the model)."""
        size = 0

        def sized(raw_lines: Iterator[bytes | LineTooLong]) -> Iterator[bytes | LineTooLong]:
            nonlocal size
            for raw in raw_lines:
                size = raw.size if isinstance(raw, LineTooLong) else len(raw)
                yield raw

        # The checker takes one raw line per line it answers (blank ones it skips), so ``size`` is its line's.
        for checked in self.checker.check(sized(self.fs.lines(self.source.stored_as, max_bytes=self.max_line_bytes))):
            yield checked, size


def _checked(session: Session, settings: Settings, *, scope: str | None, new: NewBatch) -> _Checked:
    """The file as ``scope`` sees it, its purpose, the endpoint, the window, the bytes and the line cap."""
    expiry.seconds(new.output_expires_after, name="output_expires_after")
    source = found_file(session, scope=scope, file_id=new.input_file_id)
    if source.purpose != "batch":
        raise JobRefused(INVALID_BATCH, f"file '{source.id}' has purpose '{source.purpose}', not 'batch'")
    pipeline = _pipeline(new.endpoint)
    window = _window(new.completion_window)
    opts = new.options or RequestOptions()
    fs = store(settings)
    line_count = _request_lines(fs, source, settings)  # before any row: missing bytes or too many lines refuse
    checker = LineChecker(
        pipeline,
        opts,
        new.endpoint,
        settings.model.served_model_name,
        max_line_bytes=settings.uploads.max_batch_line_bytes,
    )
    return _Checked(source, pipeline, window, opts, line_count, checker, fs, settings.uploads.max_batch_line_bytes)


def create(session: Session, settings: Settings, *, tenant: str, scope: str | None, new: NewBatch) -> Batch:
    """Check every line of the input file into the batch's job, then start it (``jobs.submit``). The batch is
    ``tenant``'s; the input file is looked up as ``scope`` sees files (None: an admin, who sees every tenant's).
    A batch whose every line is bad is returned ``failed``, its errors naming the lines."""
    checked = _checked(session, settings, scope=scope, new=new)
    batch = batches.create_batch(
        session,
        tenant=tenant,
        endpoint=new.endpoint,
        input_file_id=checked.source.id,
        completion_window=checked.window,
        window_text=new.completion_window,
        metadata=new.metadata,
        output_expires_after_s=expiry.seconds(new.output_expires_after, name="output_expires_after"),
    )
    # A batch runs as a job, so the tenant's job quotas apply to it as to any job: its lines are the job's items,
    # counted before anything is read into the job, and the job is admitted once inserted (``jobs.quotas``).
    checker = checked.checker
    request = JobRequest(
        pipeline=checked.pipeline.name,
        options=checked.options.model_dump(),
        tenant=tenant,
        lines=(_line_item(c, size) for c, size in checked.lines()),
        line_count=checked.line_count,
    )
    job = insert(session, settings, request)
    if checker.model is None:
        raise JobRefused(NO_MODEL, "no line names a 'model' and no default model is configured")
    job.model = checker.model
    if checker.valid == 0:
        errors = checker.errors or [{"code": INVALID_BATCH, "message": "the input file holds no request line"}]
        batches.fail(session, batch=batch, job=job, errors=errors)
        session.commit()
        return batch
    batches.start(session, batch=batch, job=job, model=checker.model, invalid=checker.invalid, errors=checker.errors)
    start(session, settings, job)
    return batch


def estimate(session: Session, settings: Settings, *, tenant: str, scope: str | None, new: NewBatch) -> Estimate:
    """The dry run of ``create``: the same refusals (file, purpose, endpoint, window, line cap, size and quotas,
    model), then the estimate of its valid lines (``jobs.submit.dry_run``); nothing is stored. Lines that would
    fail as they are are not run, so not counted: a warning says how many.

    The file is read as a stream, each line checked and let go: the estimate of request lines needs their count and
    the first ``LISTED_ITEMS`` custom ids, never their bodies. The reading holds one of the tenant's dry-run slots
    (``VLBATCH_DRY_RUN_CONCURRENCY``)."""
    with dry_run_slot(settings, tenant):
        checked = _checked(session, settings, scope=scope, new=new)
        session.rollback()  # nothing is written: no pooled connection waits while the file is read
        checker = checked.checker
        items: list[job_store.NewItem] = []
        for c, _ in checked.lines():
            if c.code is None and len(items) < LISTED_ITEMS:
                items.append(job_store.NewItem(inputs={"line": c.line}, ref=c.custom_id))
    if checker.model is None:
        raise JobRefused(NO_MODEL, "no line names a 'model' and no default model is configured")
    request = JobRequest(
        pipeline=checked.pipeline.name,
        model=checker.model,
        options=checked.options.model_dump(),
        items=items,  # the listed ones; the request is of every valid line (``lines``, ``line_count``)
        tenant=tenant,
        lines=iter(()),
        line_count=checker.valid,
    )
    e = dry_run(session, settings, request)
    if checker.invalid:
        e.warnings.append(f"{checker.invalid} line(s) would fail as they are and are not counted (the batch's errors)")
    return e


# ------------------------------------------------------------------------------------------------ moving on


def refresh(session: Session, settings: Settings, batch: Batch) -> Batch:
    """Move ``batch`` on if its job allows: finished, expired or cancelled batches are finalized here."""
    if batch.status in batches.DONE_STATES or batch.job_id is None:
        return batch
    job_id = batch.job_id
    now = utcnow()
    if batch.status in (BatchStatus.VALIDATING, BatchStatus.IN_PROGRESS) and batches.expired(batch, now):
        target, stamp = BatchStatus.EXPIRED, "expired_at"
        batches.end_open_items(session, job_id=job_id, expired=True)
    elif batch.status == BatchStatus.CANCELLING:
        target, stamp = BatchStatus.CANCELLED, "cancelled_at"
        batches.end_open_items(session, job_id=job_id, expired=False)
    elif batch.status == BatchStatus.IN_PROGRESS and batches.open_items(session, job_id=job_id) == 0:
        target, stamp = BatchStatus.COMPLETED, "completed_at"
    else:
        return batch
    moved = batches.move(
        session,
        batch_id=batch.id,
        from_states=[BatchStatus.IN_PROGRESS, BatchStatus.VALIDATING, BatchStatus.CANCELLING],
        to=BatchStatus.FINALIZING,
        stamp="finalizing_at",
    )
    session.commit()
    if moved:  # this reader won the move: it writes the files
        try:
            _finalize(session, settings, batch, target, stamp)
        except Exception:
            log.exception("batch %s: finalizing failed; it stays in finalizing", batch.id)
            session.rollback()
            raise
    session.refresh(batch)
    return batch


def cancel(session: Session, batch: Batch) -> Batch:
    """Cancelling keeps every answer written so far; the lines not yet answered end as ``batch_cancelled`` when
    the batch is next read (``refresh``). A batch finalizing or ended already is refused (``batch_finished``)."""
    if batch.status in batches.DONE_STATES or batch.status == BatchStatus.FINALIZING:
        raise JobRefused(BATCH_FINISHED, f"batch '{batch.id}' is {batch.status} already")
    batches.move(
        session,
        batch_id=batch.id,
        from_states=[BatchStatus.VALIDATING, BatchStatus.IN_PROGRESS],
        to=BatchStatus.CANCELLING,
        stamp="cancelling_at",
    )
    session.commit()
    session.refresh(batch)
    return batch


def _finalize(session: Session, settings: Settings, batch: Batch, target: BatchStatus, stamp: str) -> None:
    """Write the output and error files in one pass over the batch's lines, then end the batch."""
    assert batch.job_id is not None
    job = session.get(Job, batch.job_id)
    model = batch.model or (job.model if job else "")
    created = _epoch(batch.created_at)
    fs = store(settings)
    outputs, errors = fs.writer(), fs.writer()
    n_out = n_err = prompt = completion = 0
    try:
        pages = results.iter_results(session, job_id=batch.job_id, every_item=True)
        for page in pages:  # a page's lines at a time to each file
            out_buf: list[bytes] = []
            err_buf: list[bytes] = []
            for answered, line, record in batch_lines(batch.endpoint, (page,), model=model, created=created):
                prompt += record.prompt_tokens
                completion += record.completion_tokens
                (out_buf if answered else err_buf).append(line)
            n_out += len(out_buf)
            n_err += len(err_buf)
            outputs.add(b"".join(out_buf))
            errors.add(b"".join(err_buf))
    except BaseException:
        outputs.discard()
        errors.discard()
        raise
    out_id = _kept(session, outputs, n_out, batch, "output")
    err_id = _kept(session, errors, n_err, batch, "error")
    if batch.output_expires_after_s is not None and job is not None:
        # the batch's output_expires_after: its job (results, and the batch with it) goes with the files
        job.expires_at = utcnow() + timedelta(seconds=batch.output_expires_after_s)
    batches.finish(
        session,
        batch=batch,
        status=target,
        stamp=stamp,
        output_file_id=out_id,
        error_file_id=err_id,
        prompt_tokens=prompt,
        completion_tokens=completion,
    )
    session.commit()


def _kept(session: Session, writer: Writer, lines: int, batch: Batch, kind: str) -> str | None:
    """The file's id, or None (and nothing kept) when it has no line, as OpenAI leaves an unneeded file out."""
    if not lines:
        writer.discard()
        return None
    name, size = writer.keep()
    row = batches.create_file(
        session,
        tenant=batch.tenant,
        filename=f"{batch.id}_{kind}.jsonl",
        purpose="batch_output",
        size=size,
        stored_as=name,
        expires_after_s=batch.output_expires_after_s,
    )
    return row.id


def _epoch(value: datetime) -> int:
    """Seconds since 1970, as each output line's ``created`` gives them; SQLite hands back naive UTC."""
    return int((value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp())

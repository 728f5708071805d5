"""CRUD over files, batches and a batch's items. Keyword-only arguments; no HTTP errors.

Every lookup of a file or a batch is scoped (``owned``): to the asking tenant, or to none for an admin, so
one tenant never sees another's rows; new rows carry their tenant. A batch's items are inserted page by
page as its input file is read, so a large file never sits whole in memory; its chunks are made as the pages
fill.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

from sqlalchemy import Select, func, insert, select, update
from sqlalchemy.orm import Session

from vlbatch.db import job_store, webhooks
from vlbatch.db.models import (
    TERMINAL_ITEM_STATES,
    Batch,
    BatchStatus,
    Chunk,
    Item,
    ItemStatus,
    Job,
    JobStatus,
    StoredFile,
    utcnow,
)
from vlbatch.errors import BATCH_CANCELLED, BATCH_EXPIRED

T = TypeVar("T", Batch, StoredFile)
PAGE_ITEMS = 1000  # batch items inserted per statement, at most
# ... and at most this many bytes of input lines: a line's parsed body takes up to some 24 times its size (a MiB of
# ``[]`` is a million lists), so a page of a thousand long lines would hold gigabytes.
PAGE_BYTES = 1024 * 1024
DONE_STATES = frozenset({BatchStatus.COMPLETED, BatchStatus.FAILED, BatchStatus.EXPIRED, BatchStatus.CANCELLED})


def owned(stmt: Select[T], model: type[T], scope: str | None) -> Select[T]:
    """The one place files and batches are scoped: to tenant ``scope``, or every tenant when None (an admin)."""
    return stmt if scope is None else stmt.where(model.tenant == scope)


# ------------------------------------------------------------------------------------------------- files


def create_file(
    session: Session,
    *,
    tenant: str,
    filename: str,
    purpose: str,
    size: int,
    stored_as: str,
    expires_after_s: int | None = None,
) -> StoredFile:
    """``expires_after_s``: the file's own expiry from now (None: its tenant's file retention applies)."""
    now = utcnow()
    row = StoredFile(
        id=f"file-{uuid.uuid4().hex}",
        tenant=tenant,
        filename=filename,
        purpose=purpose,
        bytes=size,
        stored_as=stored_as,
        created_at=now,
        expires_at=now + timedelta(seconds=expires_after_s) if expires_after_s is not None else None,
    )
    session.add(row)
    session.flush()
    return row


def uploads_held(session: Session, *, tenant: str) -> tuple[int, int]:
    """(files, bytes) the tenant's uploads hold: files of purpose ``batch`` (a batch's output is not an upload)."""
    count, total = session.execute(
        select(func.count(StoredFile.id), func.coalesce(func.sum(StoredFile.bytes), 0)).where(
            StoredFile.tenant == tenant, StoredFile.purpose == "batch"
        )
    ).one()
    return int(count), int(total)


def get_file(session: Session, *, scope: str | None, file_id: str) -> StoredFile | None:
    return session.scalars(owned(select(StoredFile).where(StoredFile.id == file_id), StoredFile, scope)).first()


def list_files(
    session: Session, *, scope: str | None, purpose: str | None, limit: int, after: str | None
) -> list[StoredFile]:
    """Newest first; ``after`` is the id of the last file of the previous page."""
    stmt = owned(select(StoredFile), StoredFile, scope)
    if purpose:
        stmt = stmt.where(StoredFile.purpose == purpose)
    if after and (mark := get_file(session, scope=scope, file_id=after)) is not None:
        stmt = stmt.where((StoredFile.created_at, StoredFile.id) < (mark.created_at, mark.id))  # type: ignore[operator]
    return list(session.scalars(stmt.order_by(StoredFile.created_at.desc(), StoredFile.id.desc()).limit(limit)))


def delete_file(session: Session, *, row: StoredFile) -> None:
    session.delete(row)


# ----------------------------------------------------------------------------------------------- batches


def create_batch(
    session: Session,
    *,
    tenant: str,
    endpoint: str,
    input_file_id: str,
    completion_window: timedelta,
    window_text: str,
    metadata: dict[str, str] | None,
    output_expires_after_s: int | None = None,
) -> Batch:
    now = utcnow()
    batch = Batch(
        id=f"batch_{uuid.uuid4().hex}",
        tenant=tenant,
        endpoint=endpoint,
        input_file_id=input_file_id,
        completion_window=window_text,
        status=BatchStatus.VALIDATING,
        meta=metadata,
        errors=[],
        invalid_lines=0,
        prompt_tokens=0,
        completion_tokens=0,
        created_at=now,
        expires_at=now + completion_window,
        output_expires_after_s=output_expires_after_s,
    )
    session.add(batch)
    session.flush()
    return batch


def get_batch(session: Session, *, scope: str | None, batch_id: str) -> Batch | None:
    return session.scalars(owned(select(Batch).where(Batch.id == batch_id), Batch, scope)).first()


def list_batches(session: Session, *, scope: str | None, limit: int, after: str | None) -> list[Batch]:
    """Newest first; ``after`` is the id of the last batch of the previous page."""
    stmt = owned(select(Batch), Batch, scope)
    if after and (mark := get_batch(session, scope=scope, batch_id=after)) is not None:
        stmt = stmt.where((Batch.created_at, Batch.id) < (mark.created_at, mark.id))  # type: ignore[operator]
    return list(session.scalars(stmt.order_by(Batch.created_at.desc(), Batch.id.desc()).limit(limit)))


def new_job(
    session: Session, *, tenant: str, pipeline: str, model: str, options: dict[str, Any], priority: str = "batch"
) -> Job:
    """The job a batch runs as, with no items yet (``add_items`` fills it)."""
    return job_store.new_job_row(
        session, tenant=tenant, pipeline=pipeline, model=model, options=options, priority=priority, total=0
    )


@dataclass(frozen=True)
class LineItem:
    """One input line as an item: a request to run, or (``error_code`` set) a line that fails as it is."""

    ref: str | None
    inputs: dict[str, Any]
    error_code: str | None = None
    error_message: str | None = None
    size: int = 0  # the input line's bytes: what its parsed inputs cost, as ``add_items`` counts a page


def add_items(session: Session, *, job: Job, lines: Iterable[LineItem], chunk_size: int) -> int:
    """Insert ``lines`` as the job's items, in order, a page at a time (``PAGE_ITEMS`` lines or ``PAGE_BYTES`` of
    them, whichever fills first), making chunks as they fill. ``lines`` is read as it is inserted: no more than a
    page of it is held. Returns the job's item count (also set on the job)."""
    seq = job.total
    written = job.results_written or 0  # a line failed as it is is a finished item: it takes a write position
    chunk_id: int | None = None
    page: list[dict[str, Any]] = []
    page_bytes = 0

    def flush() -> None:
        nonlocal page_bytes
        if page:
            session.execute(insert(Item), page)
            page.clear()
            page_bytes = 0

    now = utcnow()
    for line in lines:
        if seq % chunk_size == 0:
            flush()
            chunk_id = session.scalar(insert(Chunk).values(job_id=job.id, seq=seq // chunk_size).returning(Chunk.id))
        failed = line.error_code is not None
        page.append(
            {
                "job_id": job.id,
                "chunk_id": chunk_id,
                "seq": seq,
                "ref": line.ref,
                "inputs": line.inputs,
                "status": ItemStatus.FAILED if failed else ItemStatus.QUEUED,
                "error_code": line.error_code,
                "error_message": line.error_message,
                "written_seq": written if failed else None,
                "attempts": 0,
                "crash_count": 0,
                "updated_at": now,
            }
        )
        seq += 1
        written += failed
        page_bytes += line.size
        if len(page) >= PAGE_ITEMS or page_bytes >= PAGE_BYTES:
            flush()
    flush()
    job.total = seq
    job.results_written = written
    session.flush()
    return seq


def start(session: Session, *, batch: Batch, job: Job, model: str, invalid: int, errors: list[dict[str, Any]]) -> None:
    """Validation done: the batch runs as ``job``."""
    batch.job_id = job.id
    batch.model = model
    batch.invalid_lines = invalid
    batch.errors = errors
    batch.status = BatchStatus.IN_PROGRESS
    batch.in_progress_at = utcnow()
    if job.total == invalid:  # nothing to run: every line failed validation
        job.status = JobStatus.FINISHED
        job.finished_at = utcnow()


def fail(session: Session, *, batch: Batch, job: Job, errors: list[dict[str, Any]]) -> None:
    """No line of the input can run: the batch fails, and its job (every item failed) ends, so it is not left
    queued for ever, counted against the tenant's active-jobs quota."""
    batch.status = BatchStatus.FAILED
    batch.errors = errors
    batch.failed_at = utcnow()
    job.status = JobStatus.FINISHED
    job.finished_at = utcnow()
    session.flush()
    webhooks.batch_event(session, batch=batch, status=BatchStatus.FAILED)  # the outbox, in the same transaction


def request_counts(session: Session, *, batch: Batch) -> dict[str, int]:
    """OpenAI's ``request_counts``: total lines, completed (answered), failed (everything else that ended)."""
    if batch.job_id is None:
        return {"total": 0, "completed": 0, "failed": 0}
    counts = job_store.item_counts(session, job_id=batch.job_id)
    failed = counts[ItemStatus.FAILED] + counts[ItemStatus.CANCELLED] + counts[ItemStatus.EXPIRED]
    return {"total": sum(counts.values()), "completed": counts[ItemStatus.SUCCEEDED], "failed": failed}


def open_items(session: Session, *, job_id: str) -> int:
    return int(
        session.scalar(
            select(func.count())
            .select_from(Item)
            .where(Item.job_id == job_id, Item.status.not_in(list(TERMINAL_ITEM_STATES)))
        )
        or 0
    )


def end_open_items(session: Session, *, job_id: str, expired: bool) -> int:
    """Queued and running items end unrun: ``expired`` (completion window over) or cancelled. A running
    item's answer, when it comes, is then not written (results move only from running)."""
    status, code = (ItemStatus.EXPIRED, BATCH_EXPIRED) if expired else (ItemStatus.CANCELLED, BATCH_CANCELLED)
    message = (
        "the batch's completion window ended before this request ran"
        if expired
        else "the batch was cancelled before this request ran"
    )
    res = session.execute(
        update(Item)
        .where(Item.job_id == job_id, Item.status.in_([ItemStatus.QUEUED, ItemStatus.RUNNING]))
        .values(status=status, error_code=code, error_message=message, updated_at=utcnow())
    )
    job_res = session.execute(
        update(Job)
        .where(Job.id == job_id, Job.status != JobStatus.CANCELLED)
        .values(status=JobStatus.CANCELLED, finished_at=utcnow())
    )
    if job_res.rowcount:  # type: ignore[attr-defined]
        webhooks.job_event(session, job_id=job_id, event="job.cancelled")
    return int(res.rowcount or 0)  # type: ignore[attr-defined]


def move(session: Session, *, batch_id: str, from_states: Sequence[str], to: BatchStatus, stamp: str) -> bool:
    """Compare-and-set of a batch's status (with its timestamp column): True for the one caller that moved it."""
    res = session.execute(
        update(Batch)
        .where(Batch.id == batch_id, Batch.status.in_(list(from_states)))
        .values({"status": to, stamp: utcnow()})
    )
    return bool(res.rowcount)  # type: ignore[attr-defined]


def finish(
    session: Session,
    *,
    batch: Batch,
    status: BatchStatus,
    stamp: str,
    output_file_id: str | None,
    error_file_id: str | None,
    prompt_tokens: int,
    completion_tokens: int,
) -> None:
    values: dict[str, Any] = {
        "status": status,
        stamp: utcnow(),
        "output_file_id": output_file_id,
        "error_file_id": error_file_id,
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
    }
    session.execute(update(Batch).where(Batch.id == batch.id).values(values))
    webhooks.batch_event(session, batch=batch, status=status, values=values)  # the outbox, in the same transaction


def expired(batch: Batch, now: datetime) -> bool:
    if batch.expires_at is None:
        return False
    return (
        batch.expires_at.replace(tzinfo=now.tzinfo) <= now
        if batch.expires_at.tzinfo is None
        else batch.expires_at <= now
    )


def due_to_finalize(session: Session, *, now: datetime, tenants: Sequence[str], limit: int) -> list[Batch]:
    """Open batches of ``tenants`` that a read would move on now: cancelling, past their
    window, or whose job has ended. The webhook sender finalizes them, so a batch event does not wait for a poll."""
    ended = select(Job.id).where(Job.id == Batch.job_id, Job.status.in_([JobStatus.FINISHED, JobStatus.CANCELLED]))
    stmt = select(Batch).where(
        Batch.tenant.in_(list(tenants)),
        Batch.job_id.is_not(None),
        Batch.status.in_([BatchStatus.VALIDATING, BatchStatus.IN_PROGRESS, BatchStatus.CANCELLING]),
        (Batch.status == BatchStatus.CANCELLING) | (Batch.expires_at <= now) | ended.exists(),
    )
    return list(session.scalars(stmt.order_by(Batch.created_at).limit(limit)))

"""The job repository: jobs, their chunks and items made, read, listed, cancelled, paused, resumed and rerun.

Only the jobs service (``jobs.submit``, ``jobs.actions``) makes jobs; readers may call the rest. Keyword-only
arguments; no HTTP errors."""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, overload

from sqlalchemy import func, insert, or_, select, update
from sqlalchemy.orm import Session

from vlbatch.db import webhooks
from vlbatch.db.bulk import in_batches, one_behind
from vlbatch.db.item_rows import ItemEntry, write_item_rows
from vlbatch.db.models import (
    DEFAULT_TENANT,
    Chunk,
    Item,
    ItemStatus,
    Job,
    JobStatus,
    Result,
    utcnow,
)
from vlbatch.db.tags import carry_edits, job_edits
from vlbatch.inputs import NAME_NOT_UTF8, VIDEO_SUFFIXES, storable

STREAM_BATCH = 5_000  # items per write of a streamed job (a folder walked, NDJSON lines): what it holds at once

# Options that say how a job runs, not what its answers are: left out of the hash, so a job that turns reuse off
# still makes answers a later job may reuse (and the two share the marker).
RUN_ONLY_OPTIONS = frozenset({"reuse"})


def shaping_options(options: dict[str, Any]) -> dict[str, Any]:
    """A job's options that shape its answers: all but those that only say how it runs."""
    return {k: v for k, v in options.items() if k not in RUN_ONLY_OPTIONS}


def options_hash(pipeline: str, options: dict[str, Any]) -> str:
    """Stable hash of what shapes a result (processed-with marker): the pipeline and its ``shaping_options``."""
    blob = json.dumps(
        {"pipeline": pipeline, "options": shaping_options(options)}, sort_keys=True, separators=(",", ":")
    )
    return hashlib.sha256(blob.encode()).hexdigest()


@dataclass(frozen=True)
class NewItem:
    inputs: dict[str, Any]
    ref: str | None = None


class PathItems(Sequence[NewItem]):
    """Image paths grouped, in order, into items of ``images_per_prompt`` images (a burst per prompt), then each
    video as an item by itself; an item is made when it is read. A million-file folder is held as its paths only,
    not a million item objects as well (their dicts and lists cost four times the paths)."""

    def __init__(self, paths: Sequence[str], *, images_per_prompt: int) -> None:
        self._images = [p for p in paths if os.path.splitext(p)[1].lower() not in VIDEO_SUFFIXES]
        self._videos = [p for p in paths if os.path.splitext(p)[1].lower() in VIDEO_SUFFIXES]
        self._per_item = images_per_prompt
        self._image_items = -(-len(self._images) // images_per_prompt)

    def __len__(self) -> int:
        return self._image_items + len(self._videos)

    @overload
    def __getitem__(self, index: int) -> NewItem: ...

    @overload
    def __getitem__(self, index: slice) -> list[NewItem]: ...

    def __getitem__(self, index: int | slice) -> NewItem | list[NewItem]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        if index >= self._image_items:
            return _path_item("images", self._videos[index - self._image_items : index - self._image_items + 1])
        start = index * self._per_item
        return _path_item("images", self._images[start : start + self._per_item])


def _path_item(key: str, paths: Sequence[str]) -> NewItem:
    """The item of a folder's ``paths`` (``key``: ``images``, a list; ``path``, one document), its ref the first;
    a name that is not UTF-8 is stored escaped and marks the item (``vlbatch.inputs.storable``)."""
    shown, escaped = storable(paths)
    inputs: dict[str, Any] = {key: shown if key == "images" else shown[0]}
    if escaped:
        inputs[NAME_NOT_UTF8] = True
    return NewItem(inputs=inputs, ref=shown[0])


def streamed_path_items(paths: Iterable[str], *, images_per_prompt: int) -> Iterator[NewItem]:
    """``PathItems``' items, made as ``paths`` are read: images grouped as they come, each video held to the end (as
    ``PathItems`` puts them last; an album's clips are few beside its photos)."""
    group: list[str] = []
    videos: list[str] = []
    for path in paths:
        if os.path.splitext(path)[1].lower() in VIDEO_SUFFIXES:
            videos.append(path)
            continue
        group.append(path)
        if len(group) == images_per_prompt:
            yield _path_item("images", group)
            group = []
    if group:
        yield _path_item("images", group)
    for video in videos:
        yield _path_item("images", [video])


def document_path_items(paths: Sequence[str]) -> list[NewItem]:
    """One document item per path of a folder's listing, as ``PathItems`` makes image ones."""
    return [_path_item("path", [p]) for p in paths]


def items_from_paths(paths: Sequence[str], *, images_per_prompt: int) -> PathItems:
    """The items of a folder's paths (``PathItems``)."""
    return PathItems(paths, images_per_prompt=images_per_prompt)


def get_job_by_idempotency_key(session: Session, *, key: str, tenant: str) -> Job | None:
    """The tenant's job made with this Idempotency-Key (keys are per tenant)."""
    return session.scalars(select(Job).where(Job.tenant == tenant, Job.idempotency_key == key)).first()


ACTIVE_JOB_STATES = (JobStatus.QUEUED, JobStatus.RUNNING, JobStatus.PAUSED)


def hold_tenant_job_creation(session: Session, *, tenant: str) -> None:
    """Serialise job creation for ``tenant`` until this transaction ends, so that a count of its jobs taken after
    this call and the job inserted before the commit are one step: a concurrent create of the same tenant waits
    here and then counts the job this one inserted.

    PostgreSQL: a transaction-scoped advisory lock on a hash of the tenant (other tenants go on). SQLite: the
    database's write lock, taken now (``BEGIN IMMEDIATE``) rather than at the first insert; SQLite has one writer
    at a time anyway, and the driver opens a transaction only at the first write, so none is open yet unless this
    transaction has written already, and then it holds the write lock.
    """
    conn = session.connection()
    if conn.dialect.name == "postgresql":
        digest = hashlib.blake2b(f"vlbatch.jobs-of-tenant:{tenant}".encode(), digest_size=8).digest()
        key = int.from_bytes(digest, "big", signed=True)  # advisory locks take a signed 64-bit key
        session.execute(select(func.pg_advisory_xact_lock(key)))
    elif conn.dialect.name == "sqlite":
        driver: Any = conn.connection.driver_connection
        if not driver.in_transaction:
            driver.execute("BEGIN IMMEDIATE")  # waits up to the connection's busy timeout for another writer
    else:
        raise NotImplementedError(f"no tenant lock for the {conn.dialect.name} database")


def count_active_jobs(session: Session, *, tenant: str) -> int:
    """The tenant's unfinished (queued or running) jobs: what its active-jobs quota counts. Exact against
    concurrent creates only after ``hold_tenant_job_creation`` in the same transaction."""
    stmt = select(func.count()).select_from(Job).where(Job.tenant == tenant, Job.status.in_(ACTIVE_JOB_STATES))
    return int(session.scalar(stmt) or 0)


def new_job_row(
    session: Session,
    *,
    tenant: str,
    pipeline: str,
    model: str,
    options: dict[str, Any],
    priority: str,
    total: int,
    idempotency_key: str | None = None,
    idempotency_hash: str | None = None,
    output_dir: str | None = None,
) -> Job:
    """The one constructor of a ``jobs`` row, flushed so its id is known; its chunks and items are the caller's
    (``create_job`` here, ``batches.add_items`` for a batch's streamed lines)."""
    job = Job(
        id=uuid.uuid4().hex,
        tenant=tenant,
        pipeline=pipeline,
        model=model,
        priority=priority,
        options=options,
        options_hash=options_hash(pipeline, options),
        idempotency_key=idempotency_key,
        idempotency_hash=idempotency_hash,
        total=total,
        output_dir=output_dir,
    )
    session.add(job)
    session.flush()
    return job


def create_job(
    session: Session,
    *,
    pipeline: str,
    model: str,
    options: dict[str, Any],
    items: Sequence[NewItem],
    chunk_size: int,
    priority: str = "batch",
    idempotency_key: str | None = None,
    output_dir: str | None = None,
    tenant: str = DEFAULT_TENANT,
    idempotency_hash: str | None = None,
) -> Job:
    """Insert a job with its chunks and items in bulk (a 100k-item job in seconds)."""
    job = new_job_row(
        session,
        tenant=tenant,
        pipeline=pipeline,
        model=model,
        options=options,
        priority=priority,
        total=len(items),
        idempotency_key=idempotency_key,
        idempotency_hash=idempotency_hash,
        output_dir=output_dir,
    )
    n_chunks = (len(items) + chunk_size - 1) // chunk_size
    chunk_ids = list(
        session.scalars(
            insert(Chunk).returning(Chunk.id, sort_by_parameter_order=True),
            [{"job_id": job.id, "seq": s} for s in range(n_chunks)],
        )
    )
    _insert_items(session, job_id=job.id, chunk_ids=chunk_ids, chunk_size=chunk_size, items=items)
    return job


ITEM_BATCH = 10_000  # items per write of a listed job


def _insert_items(
    session: Session, *, job_id: str, chunk_ids: Sequence[int], chunk_size: int, items: Sequence[NewItem]
) -> None:
    """The job's item rows, ``ITEM_BATCH`` at a time (``item_rows.write_item_rows``)."""
    for start in range(0, len(items), ITEM_BATCH):
        entries: list[ItemEntry] = []
        for i in range(start, min(start + ITEM_BATCH, len(items))):
            it = items[i]
            entries.append((chunk_ids[i // chunk_size], i, it.ref, it.inputs))
        write_item_rows(session, job_id=job_id, entries=entries)


def add_item_stream(
    session: Session, *, job: Job, items: Iterable[NewItem], chunk_size: int, batch_items: int = STREAM_BATCH
) -> int:
    """Insert ``items`` as ``job``'s items in order, ``batch_items`` at a time, with the chunks they fill; ``items`` is
    read as it is inserted, so no more than two batches of it are held: each batch is written on a thread of its
    own (``one_behind``) while the next one is read, so the database's work on one overlaps the reading (parsing,
    confining) of the next. ``items`` must not use ``session``. Sets and returns the job's item count. Nothing is
    committed: whatever ``items`` raises (a refusal found on the way) leaves the transaction to the caller's
    rollback, once the batch being written is done."""
    job_id = job.id
    chunk_of: dict[int, int] = {}  # chunk seq -> id, for the chunks this batch writes into

    def write(batch: list[NewItem], seq: int) -> None:
        nonlocal chunk_of
        last = (seq + len(batch) - 1) // chunk_size
        first_new = -(-seq // chunk_size)  # the chunk of ``seq`` exists already unless ``seq`` starts one
        chunk_of = {k: v for k, v in chunk_of.items() if k >= seq // chunk_size}
        if first_new <= last:
            ids = session.scalars(
                insert(Chunk).returning(Chunk.id, sort_by_parameter_order=True),
                [{"job_id": job_id, "seq": k} for k in range(first_new, last + 1)],
            )
            chunk_of.update(zip(range(first_new, last + 1), ids, strict=True))
        entries = [(chunk_of[(seq + n) // chunk_size], seq + n, it.ref, it.inputs) for n, it in enumerate(batch)]
        write_item_rows(session, job_id=job_id, entries=entries)

    seq = 0
    with one_behind() as write_behind:
        for batch in in_batches(iter(items), batch_items):
            write_behind(write, batch, seq)
            seq += len(batch)
    job.total = seq
    session.flush()
    return seq


def rerun_selection(
    session: Session,
    *,
    job: Job,
    scope: str,
    pipeline_version: str | None = None,
    model_revision: str | None = None,
) -> list[tuple[int, NewItem]]:
    """(old item id, its inputs as a new item) of ``job``'s items a re-run takes, in order: every item (``all``),
    those that did not succeed (``missing``), or those whose processed-with marker differs from now (``refresh``: no
    result, or a result made by another model, pipeline version (``pipeline_version``), options, or, when given,
    model revision)."""
    stmt = select(Item.id, Item.inputs, Item.ref).where(Item.job_id == job.id)
    if scope == "missing":
        stmt = stmt.where(Item.status != ItemStatus.SUCCEEDED)
    elif scope == "refresh":
        stale = [
            Result.item_id.is_(None),
            Item.status != ItemStatus.SUCCEEDED,
            Result.model != job.model,
            Result.options_hash != job.options_hash,
        ]
        if pipeline_version is not None:
            stale.append(Result.pipeline_version != pipeline_version)
        if model_revision is not None:
            stale.append(or_(Result.model_revision.is_(None), Result.model_revision != model_revision))
        stmt = stmt.outerjoin(Result, Result.item_id == Item.id).where(or_(*stale))
    return [
        (item_id, NewItem(inputs=inputs, ref=ref)) for item_id, inputs, ref in session.execute(stmt.order_by(Item.seq))
    ]


def carry_rerun_edits(session: Session, *, old_job_id: str, new_job_id: str, old_item_ids: Sequence[int]) -> None:
    """The operator's tag edits (``vlbatch.db.tags``) go with the re-run items, so the new results are merged with
    them; ``old_item_ids``: the items the new job was made of, in its items' order."""
    if edits := job_edits(session, job_id=old_job_id):
        new_ids = session.scalars(select(Item.id).where(Item.job_id == new_job_id).order_by(Item.seq))
        carry_edits(session, edits=edits, new_item_of=dict(zip(old_item_ids, new_ids, strict=True)))


def get_job(session: Session, *, job_id: str, tenant: str | None = None) -> Job | None:
    """The job, or None when there is none or it belongs to another tenant (``tenant`` None: any tenant)."""
    job = session.get(Job, job_id)
    if job is None or (tenant is not None and job.tenant != tenant):
        return None
    return job


def item_counts(session: Session, *, job_id: str) -> dict[str, int]:
    counts = {s.value: 0 for s in ItemStatus}
    stmt = select(Item.status, func.count()).where(Item.job_id == job_id).group_by(Item.status)
    for status, n in session.execute(stmt):
        counts[status] = n
    return counts


def list_items(session: Session, *, job_id: str, after_seq: int, limit: int, status: str | None = None) -> list[Item]:
    stmt = select(Item).where(Item.job_id == job_id, Item.seq > after_seq)
    if status:
        stmt = stmt.where(Item.status == status)
    return list(session.scalars(stmt.order_by(Item.seq).limit(limit)))


def cancel_job(session: Session, *, job_id: str) -> int | None:
    """Cancel every item not yet terminal; running items lose their result when they finish. None when the job
    has ended (finished or cancelled): its status and ``finished_at`` stay as they are. The job row is updated
    first, under its own condition, so a job that finishes meanwhile is never overwritten."""
    ended = [JobStatus.FINISHED, JobStatus.CANCELLED]
    job_res = session.execute(
        update(Job)
        .where(Job.id == job_id, Job.status.not_in(ended))
        .values(status=JobStatus.CANCELLED, finished_at=utcnow())
    )
    if not job_res.rowcount:  # type: ignore[attr-defined]
        return None
    res = session.execute(
        update(Item)
        .where(Item.job_id == job_id, Item.status.in_([ItemStatus.QUEUED, ItemStatus.RUNNING]))
        .values(status=ItemStatus.CANCELLED, updated_at=utcnow())
    )
    webhooks.job_event(session, job_id=job_id, event="job.cancelled")  # the outbox, in the cancel's transaction
    return int(res.rowcount or 0)  # type: ignore[attr-defined]


def pause_job(session: Session, *, job_id: str) -> bool:
    """Pause a queued or running job: workers claim none of its chunks from now on, and the items they hold
    finish. False when the job is in another state (finished, cancelled, already paused)."""
    res = session.execute(
        update(Job)
        .where(Job.id == job_id, Job.status.in_([JobStatus.QUEUED, JobStatus.RUNNING]))
        .values(status=JobStatus.PAUSED)
    )
    return bool(res.rowcount)  # type: ignore[attr-defined]


def resume_job(session: Session, *, job_id: str) -> list[int] | None:
    """Resume a paused job (running if it had started, else queued). Returns the ids of its chunks to send
    again, those not done and not held under a live lease (their messages were dropped while it was paused);
    None when the job was not paused."""
    now = utcnow()
    started = session.scalar(select(Job.started_at).where(Job.id == job_id, Job.status == JobStatus.PAUSED))
    res = session.execute(
        update(Job)
        .where(Job.id == job_id, Job.status == JobStatus.PAUSED)
        .values(status=JobStatus.RUNNING if started is not None else JobStatus.QUEUED)
    )
    if not res.rowcount:  # type: ignore[attr-defined]
        return None
    free = or_(Chunk.lease_owner.is_(None), Chunk.lease_expires_at < now)
    ids = list(
        session.scalars(select(Chunk.id).where(Chunk.job_id == job_id, Chunk.done.is_(False), free).order_by(Chunk.seq))
    )
    if ids:  # not enqueued: should the caller's publish fail, the reconciler sends them on its next pass
        session.execute(update(Chunk).where(Chunk.id.in_(ids)).values(enqueued_at=None))
    return ids


def job_of_chunk(session: Session, *, chunk_id: int) -> str | None:
    return session.scalar(select(Chunk.job_id).where(Chunk.id == chunk_id))


def chunks_of(session: Session, *, job_id: str) -> list[int]:
    return list(session.scalars(select(Chunk.id).where(Chunk.job_id == job_id).order_by(Chunk.seq)))


def chunks_left(session: Session, *, job_id: str) -> list[int]:
    """The job's chunks not done yet, in order."""
    return list(
        session.scalars(select(Chunk.id).where(Chunk.job_id == job_id, Chunk.done.is_(False)).order_by(Chunk.seq))
    )


def list_jobs(
    session: Session,
    *,
    tenant: str | None,
    limit: int,
    before: tuple[datetime, str] | None = None,
    status: str | None = None,
) -> list[Job]:
    """Jobs newest first, ``limit`` of them, after the keyset ``before`` (created_at, id) of the previous page;
    only ``tenant``'s (None: every tenant's) and, when given, only those in ``status``."""
    stmt = select(Job).order_by(Job.created_at.desc(), Job.id.desc()).limit(limit)
    if tenant is not None:
        stmt = stmt.where(Job.tenant == tenant)
    if status is not None:
        stmt = stmt.where(Job.status == status)
    if before is not None:
        at, job_id = before
        stmt = stmt.where(or_(Job.created_at < at, (Job.created_at == at) & (Job.id < job_id)))
    return list(session.scalars(stmt))


def retry_failed(session: Session, *, job_id: str) -> list[int]:
    """Queue a job's failed items again, in place: their error is cleared, their chunks are open and not
    enqueued (the caller publishes them; else the reconciler does), and the job is running again. Returns
    the chunk ids to send; [] when no item failed."""
    chunk_ids = sorted(
        set(session.scalars(select(Item.chunk_id).where(Item.job_id == job_id, Item.status == ItemStatus.FAILED)))
    )
    if not chunk_ids:
        return []
    session.execute(
        update(Item)
        .where(Item.job_id == job_id, Item.status == ItemStatus.FAILED)
        .values(status=ItemStatus.QUEUED, error_code=None, error_message=None, written_seq=None, updated_at=utcnow())
    )
    session.execute(update(Chunk).where(Chunk.id.in_(chunk_ids)).values(done=False, enqueued_at=None))
    session.execute(
        update(Job)
        .where(Job.id == job_id, Job.status != JobStatus.CANCELLED)
        .values(status=JobStatus.RUNNING, finished_at=None)
    )
    return chunk_ids

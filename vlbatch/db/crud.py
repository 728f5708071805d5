"""CRUD functions over jobs, chunks, items and results. Keyword-only arguments; no HTTP errors."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import uuid
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, overload

from sqlalchemy import case, func, insert, or_, select, update
from sqlalchemy.orm import Session

from vlbatch.db.models import (
    DEFAULT_TENANT,
    TERMINAL_ITEM_STATES,
    Base,
    Chunk,
    Item,
    ItemStatus,
    Job,
    JobStatus,
    Result,
    TagEdit,
    utcnow,
)
from vlbatch.db.queues import queue_paused
from vlbatch.db.tags import carry_edits, edits_for, job_edits, merged_tags
from vlbatch.inputs import VIDEO_SUFFIXES


def options_hash(pipeline: str, options: dict[str, Any]) -> str:
    """Stable hash of what shapes a result (processed-with marker)."""
    blob = json.dumps({"pipeline": pipeline, "options": options}, sort_keys=True, separators=(",", ":"))
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
            video = self._videos[index - self._image_items]
            return NewItem(inputs={"images": [video]}, ref=video)
        start = index * self._per_item
        return NewItem(inputs={"images": self._images[start : start + self._per_item]}, ref=self._images[start])


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
        total=len(items),
        output_dir=output_dir,
    )
    session.add(job)
    session.flush()
    n_chunks = (len(items) + chunk_size - 1) // chunk_size
    chunk_ids = list(
        session.scalars(
            insert(Chunk).returning(Chunk.id, sort_by_parameter_order=True),
            [{"job_id": job.id, "seq": s} for s in range(n_chunks)],
        )
    )
    _insert_items(session, job_id=job.id, chunk_ids=chunk_ids, chunk_size=chunk_size, items=items)
    return job


_ITEM_COLUMNS = ("job_id", "chunk_id", "seq", "ref", "inputs", "status", "attempts", "crash_count", "updated_at")


def _insert_items(
    session: Session, *, job_id: str, chunk_ids: Sequence[int], chunk_size: int, items: Sequence[NewItem]
) -> None:
    """The job's item rows straight through the driver: COPY on PostgreSQL, one executemany per batch on SQLite.

    The ORM's bulk insert spent most of a 100k-item job on per-row parameter processing; these rows need
    none: ``inputs`` are JSON-encoded here (as the JSON type would), the timestamp is rendered once.
    """
    conn = session.connection()
    dialect = conn.dialect
    table = Base.metadata.tables[Item.__tablename__]
    now = utcnow()
    status = ItemStatus.QUEUED.value

    def rows(encode: Any, stamp: Any) -> Iterator[tuple[Any, ...]]:
        for i, it in enumerate(items):
            yield (job_id, chunk_ids[i // chunk_size], i, it.ref, encode(it.inputs), status, 0, 0, stamp)

    cols = ", ".join(_ITEM_COLUMNS)
    serialize = getattr(dialect, "_json_serializer", None) or json.dumps
    if dialect.name == "postgresql" and dialect.driver == "psycopg":
        # COPY's text format; PostgreSQL parses the ISO timestamp as timestamptz and the text as json.
        driver: Any = conn.connection.driver_connection  # the psycopg connection, in this transaction
        with driver.cursor() as cur, cur.copy(f"COPY {table.name} ({cols}) FROM STDIN") as copy:
            for row in rows(serialize, now.isoformat()):
                copy.write_row(row)
    elif dialect.paramstyle == "qmark":  # SQLite
        to_db = table.c.updated_at.type.dialect_impl(dialect).bind_processor(dialect)
        sql = f"INSERT INTO {table.name} ({cols}) VALUES ({', '.join('?' * len(_ITEM_COLUMNS))})"
        for batch in _batches(rows(serialize, to_db(now) if to_db else now), 10_000):
            conn.exec_driver_sql(sql, batch)
    else:  # any other driver: the Core insert, which encodes the values itself
        for batch in _batches(rows(lambda v: v, now), 10_000):
            conn.execute(insert(table), [dict(zip(_ITEM_COLUMNS, r, strict=True)) for r in batch])


def _batches(rows: Iterator[tuple[Any, ...]], size: int) -> Iterator[list[tuple[Any, ...]]]:
    while batch := list(itertools.islice(rows, size)):
        yield batch


def rerun_job(
    session: Session,
    *,
    job: Job,
    scope: str,
    chunk_size: int,
    pipeline_version: str | None = None,
    model_revision: str | None = None,
) -> Job | None:
    """A new job over ``job``'s inputs: every item (``all``), those that did not succeed (``missing``), or
    those whose processed-with marker differs from now (``refresh``: no result, or a result made by another
    model, pipeline version (``pipeline_version``), options, or, when given, model revision). The operator's
    tag edits go with the items (``vlbatch.db.tags``): the new results are merged with them."""
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
    selected = session.execute(stmt.order_by(Item.seq)).all()
    if not selected:
        return None
    new = create_job(
        session,
        pipeline=job.pipeline,
        model=job.model,
        options=job.options,
        items=[NewItem(inputs=inputs, ref=ref) for _, inputs, ref in selected],
        chunk_size=chunk_size,
        priority=job.priority,
        output_dir=job.output_dir,
        tenant=job.tenant,
    )
    if edits := job_edits(session, job_id=job.id):  # the new items are the selected ones, in the same order
        new_ids = session.scalars(select(Item.id).where(Item.job_id == new.id).order_by(Item.seq))
        new_item_of = {old_id: new_id for (old_id, _, _), new_id in zip(selected, new_ids, strict=True)}
        carry_edits(session, edits=edits, new_item_of=new_item_of)
    return new


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


def claim_chunk(session: Session, *, chunk_id: int, owner: str, lease: timedelta) -> list[Item]:
    """Lease a chunk (compare-and-set) and return its unfinished items; [] if another worker owns it."""
    now = utcnow()
    res = session.execute(
        update(Chunk)
        .where(
            Chunk.id == chunk_id,
            Chunk.done.is_(False),
            or_(Chunk.lease_owner.is_(None), Chunk.lease_owner == owner, Chunk.lease_expires_at < now),
            # A paused job's chunks are not claimed, nor those of any job on a paused queue; the message is
            # dropped and resume_job / queues.resume_queue send them again.
            ~select(Job.id).where(Job.id == Chunk.job_id, or_(Job.status == JobStatus.PAUSED, queue_paused())).exists(),
        )
        .values(lease_owner=owner, lease_expires_at=now + lease, sends=0)
    )
    if not res.rowcount:  # type: ignore[attr-defined]
        return []
    items = list(
        session.scalars(
            select(Item)
            .where(Item.chunk_id == chunk_id, Item.status.in_([ItemStatus.QUEUED, ItemStatus.RUNNING]))
            .order_by(Item.seq)
        )
    )
    if items:
        session.execute(
            update(Item)
            .where(Item.id.in_([i.id for i in items]))
            .values(status=ItemStatus.RUNNING, attempts=Item.attempts + 1, updated_at=now)
        )
        chunk = session.get(Chunk, chunk_id)
        if chunk is not None:
            session.execute(
                update(Job)
                .where(Job.id == chunk.job_id, Job.started_at.is_(None))
                .values(started_at=now, status=JobStatus.RUNNING)
            )
    return items


@dataclass(frozen=True)
class Outcome:
    item_id: int
    job_id: str
    output: dict[str, Any] | None
    raw_text: str | None
    prompt_tokens: int
    completion_tokens: int
    error_code: str | None = None
    error_message: str | None = None


def record_outcome(
    session: Session,
    *,
    outcome: Outcome,
    model: str,
    model_revision: str | None,
    pipeline_version: str,
    options_hash: str,
) -> bool:
    """Finish one item idempotently: its state moves only from running, its result row is upserted."""
    status = ItemStatus.FAILED if outcome.error_code else ItemStatus.SUCCEEDED
    res = session.execute(
        update(Item)
        .where(Item.id == outcome.item_id, Item.status == ItemStatus.RUNNING)
        .values(status=status, error_code=outcome.error_code, error_message=outcome.error_message, updated_at=utcnow())
    )
    if not res.rowcount:  # type: ignore[attr-defined]
        return False  # already terminal (cancelled, or a redelivered duplicate)
    stamp_written(session, job_id=outcome.job_id, item_ids=[outcome.item_id])
    marker = Marker(model, model_revision, pipeline_version, options_hash)
    edits = edits_for(session, item_ids=[outcome.item_id]).get(outcome.item_id, [])
    session.execute(upsert(session, Result, result_row(outcome, marker, edits, now=utcnow()), keys=["item_id"]))
    return True


def finish_chunk(session: Session, *, chunk_id: int, owner: str) -> bool:
    """Mark the chunk done if none of its items is left, and the job finished if it was the last.

    Only the lease's owner may finish it: a worker whose lease was taken over must not wipe the new
    owner's lease. A chunk with items left is handed back (no owner, not enqueued) for the reconciler to
    send again. Returns whether the chunk is done.
    """
    left = session.scalar(
        select(func.count())
        .select_from(Item)
        .where(Item.chunk_id == chunk_id, Item.status.not_in(list(TERMINAL_ITEM_STATES)))
    )
    # Compare-and-set on the owner: between this worker's read and its write another one may have taken
    # the chunk over, and its live lease must stay.
    values: dict[str, Any] = {"done": not left, "lease_owner": None, "lease_expires_at": None}
    if left:
        values.update(enqueued_at=None, sends=0)
    res = session.execute(
        update(Chunk)
        .where(Chunk.id == chunk_id, or_(Chunk.lease_owner.is_(None), Chunk.lease_owner == owner))
        .values(**values)
    )
    if not res.rowcount or left:  # type: ignore[attr-defined]
        return False
    chunk = session.get(Chunk, chunk_id)
    assert chunk is not None
    job_left = session.scalar(
        select(func.count())
        .select_from(Item)
        .where(Item.job_id == chunk.job_id, Item.status.not_in(list(TERMINAL_ITEM_STATES)))
    )
    if not job_left:
        session.execute(
            update(Job)
            .where(Job.id == chunk.job_id, Job.status != JobStatus.CANCELLED)
            .values(status=JobStatus.FINISHED, finished_at=utcnow())
        )
    return True


# A chunk sent and never claimed waits stale_after, then twice that, ... up to this many times stale_after.
MAX_RESEND_BACKOFF = 32


def resend_wait(stale_after: timedelta, sends: int) -> timedelta:
    """How long a chunk sent ``sends`` times and never claimed waits before it is sent again."""
    return stale_after * min(2 ** max(sends - 1, 0), MAX_RESEND_BACKOFF)


def chunks_to_enqueue(
    session: Session, *, now: datetime, stale_after: timedelta, limit: int, after_id: int = 0
) -> list[Chunk]:
    """Chunks the queue may have lost: never sent, sent and unclaimed for longer than their back-off
    (``resend_wait``), or with an expired lease. One page of ``limit`` candidates by id after ``after_id``;
    the page may hold fewer (those still backing off are left out), so callers page on the last id read."""
    stmt = (
        select(Chunk)
        .join(Job, Job.id == Chunk.job_id)
        .where(Chunk.id > after_id, Chunk.done.is_(False), Job.status.in_([JobStatus.QUEUED, JobStatus.RUNNING]))
        .where(~queue_paused())  # resume_queue hands them back
        .where(
            or_(
                Chunk.enqueued_at.is_(None),
                (Chunk.lease_owner.is_(None) & (Chunk.enqueued_at < now - stale_after)),
                Chunk.lease_expires_at < now,
            )
        )
        .order_by(Chunk.id)
        .limit(limit)
    )
    return list(session.scalars(stmt))


def due_for_send(chunk: Chunk, *, now: datetime, stale_after: timedelta) -> bool:
    """Whether a candidate of ``chunks_to_enqueue`` is due now: an unclaimed chunk backs off per send."""
    if chunk.enqueued_at is None or chunk.lease_owner is not None:
        return True  # never sent, or its lease expired (the holder is gone)
    sent = chunk.enqueued_at if chunk.enqueued_at.tzinfo else chunk.enqueued_at.replace(tzinfo=now.tzinfo)
    return sent < now - resend_wait(stale_after, chunk.sends)


def unclaimed_by_model(session: Session, *, min_sends: int) -> dict[str, int]:
    """Chunks of active jobs sent ``min_sends`` times or more and never claimed, per model: work no worker takes."""
    stmt = (
        select(Job.model, func.count())
        .join(Chunk, Chunk.job_id == Job.id)
        .where(Job.status.in_([JobStatus.QUEUED, JobStatus.RUNNING]), Chunk.done.is_(False))
        .where(Chunk.lease_owner.is_(None), Chunk.sends >= min_sends, ~queue_paused())
        .group_by(Job.model)
    )
    return {model: int(n) for model, n in session.execute(stmt).all()}


ID_BATCH = 10_000  # ids per IN list: under SQLite's and PostgreSQL's bound-parameter limits (32,766 / 65,535)


def mark_enqueued(session: Session, *, chunk_ids: Sequence[int]) -> None:
    now = utcnow()
    for start in range(0, len(chunk_ids), ID_BATCH):
        ids = list(chunk_ids[start : start + ID_BATCH])
        session.execute(update(Chunk).where(Chunk.id.in_(ids)).values(enqueued_at=now, sends=Chunk.sends + 1))


def mark_unsent(session: Session, *, chunk_ids: Sequence[int]) -> None:
    """Undo ``mark_enqueued`` for chunks the broker did not take: the reconciler's next pass sends them."""
    for start in range(0, len(chunk_ids), ID_BATCH):
        ids = list(chunk_ids[start : start + ID_BATCH])
        sends = case((Chunk.sends > 0, Chunk.sends - 1), else_=0)
        session.execute(update(Chunk).where(Chunk.id.in_(ids)).values(enqueued_at=None, sends=sends))


def chunks_of(session: Session, *, job_id: str) -> list[int]:
    return list(session.scalars(select(Chunk.id).where(Chunk.job_id == job_id).order_by(Chunk.seq)))


def upsert(session: Session, table: type[Base], values: dict[str, Any], *, keys: list[str]) -> Any:
    """INSERT ... ON CONFLICT (keys) DO UPDATE of one row, for the two dialects we run on."""
    return upsert_many(session, table, [values], keys=keys)


@dataclass(frozen=True)
class Marker:
    """What a result was processed with (invariant 7)."""

    model: str
    model_revision: str | None
    pipeline_version: str
    options_hash: str


def result_row(outcome: Outcome, marker: Marker, edits: Sequence[TagEdit], *, now: datetime) -> dict[str, Any]:
    """The ``results`` row of an outcome, with its marker and its tags merged with the item's ``edits``: what
    ``record_outcome`` and ``record_outcomes`` upsert."""
    return {
        "item_id": outcome.item_id,
        "job_id": outcome.job_id,
        "output": outcome.output,
        "raw_text": outcome.raw_text,
        "prompt_tokens": outcome.prompt_tokens,
        "completion_tokens": outcome.completion_tokens,
        "model": marker.model,
        "model_revision": marker.model_revision,
        "pipeline_version": marker.pipeline_version,
        "options_hash": marker.options_hash,
        "created_at": now,
        "tags": merged_tags(outcome.output, edits),
    }


def record_outcomes(session: Session, *, outcomes: Sequence[Outcome], markers: dict[str, Marker]) -> list[int]:
    """Finish many items at once, idempotently: each moves only from running (a cancelled item or a
    redelivered duplicate is left alone) and its result row is upserted, its tags merged with the operator's
    edits (``vlbatch.db.tags``: the model's tags are replaced, the person's kept). ``markers`` by job id.
    Returns the ids that moved. One UPDATE for the successes, one per failure, one multi-row upsert."""
    if not outcomes:
        return []
    hold_jobs_for_writing(session, job_ids={o.job_id for o in outcomes})
    now = utcnow()
    ok_ids = [o.item_id for o in outcomes if not o.error_code]
    moved: set[int] = set()
    for start in range(0, len(ok_ids), 1000):
        ids = ok_ids[start : start + 1000]
        moved.update(
            session.scalars(
                update(Item)
                .where(Item.id.in_(ids), Item.status == ItemStatus.RUNNING)
                .values(status=ItemStatus.SUCCEEDED, error_code=None, error_message=None, updated_at=now)
                .returning(Item.id)
            )
        )
    for o in outcomes:
        if o.error_code:
            hit = session.scalar(
                update(Item)
                .where(Item.id == o.item_id, Item.status == ItemStatus.RUNNING)
                .values(
                    status=ItemStatus.FAILED, error_code=o.error_code, error_message=o.error_message, updated_at=now
                )
                .returning(Item.id)
            )
            if hit is not None:
                moved.add(hit)
    rows = []
    edits = edits_for(session, item_ids=sorted(moved))
    for o in outcomes:
        if o.item_id not in moved:
            continue
        rows.append(result_row(o, markers[o.job_id], edits.get(o.item_id, []), now=now))
    for start in range(0, len(rows), 500):
        session.execute(upsert_many(session, Result, rows[start : start + 500], keys=["item_id"]))
    by_job: dict[str, list[int]] = {}
    for o in outcomes:
        if o.item_id in moved:
            by_job.setdefault(o.job_id, []).append(o.item_id)
    for job_id, item_ids in sorted(by_job.items()):
        stamp_written(session, job_id=job_id, item_ids=item_ids)
    return sorted(moved)


def hold_jobs_for_writing(session: Session, *, job_ids: Collection[str]) -> None:
    """Lock the jobs' rows until this transaction ends, in id order (two writers of the same jobs never wait on
    each other crosswise), before their items are touched: the order cancel and retry take them in. Write
    positions (``stamp_written``) are then handed out in commit order. SQLite has one writer at a time anyway."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(select(Job.id).where(Job.id.in_(sorted(job_ids))).order_by(Job.id).with_for_update())


def stamp_written(session: Session, *, job_id: str, item_ids: Sequence[int]) -> None:
    """Give items of ``job_id`` that just became succeeded or failed the job's next write positions, in id order.

    The job's counter is bumped by an UPDATE, which holds the job's row until this transaction commits, so a
    transaction that takes positions after this one also commits after it: a reader paging by position never
    sees a position before all the ones below it are visible, and an item finishing out of seq order is never
    behind a reader's cursor."""
    if not item_ids:
        return
    ids = sorted(item_ids)
    end = session.scalar(
        update(Job)
        .where(Job.id == job_id)
        .values(results_written=Job.results_written + len(ids))
        .returning(Job.results_written)
    )
    if end is None:
        return  # the job is gone (deleted with its items)
    start = end - len(ids)
    session.execute(update(Item), [{"id": item_id, "written_seq": start + k} for k, item_id in enumerate(ids)])


def upsert_many(session: Session, table: type[Base], rows: list[dict[str, Any]], *, keys: list[str]) -> Any:
    """One multi-row INSERT ... ON CONFLICT (keys) DO UPDATE with the new row's values."""
    from sqlalchemy.dialects import postgresql, sqlite

    dialect = session.get_bind().dialect.name
    module: Any = postgresql if dialect == "postgresql" else sqlite
    stmt = module.insert(table).values(rows)
    cols = [k for k in rows[0] if k not in keys]
    return stmt.on_conflict_do_update(index_elements=keys, set_={k: stmt.excluded[k] for k in cols})


def renew_leases(session: Session, *, chunk_ids: Sequence[int], owner: str, lease: timedelta) -> set[int]:
    """Extend the leases this owner still holds; returns the chunk ids it holds (others were taken over)."""
    if not chunk_ids:
        return set()
    held = session.scalars(
        update(Chunk)
        .where(Chunk.id.in_(list(chunk_ids)), Chunk.lease_owner == owner, Chunk.done.is_(False))
        .values(lease_expires_at=utcnow() + lease)
        .returning(Chunk.id)
    )
    return set(held)


def release_chunks(session: Session, *, chunk_ids: Sequence[int], owner: str) -> int:
    """Hand chunks back unfinished (shutdown): no owner and not enqueued, so the reconciler sends them
    again at once; their items stay running and the next claim takes them with the queued ones."""
    if not chunk_ids:
        return 0
    res = session.execute(
        update(Chunk)
        .where(Chunk.id.in_(list(chunk_ids)), Chunk.lease_owner == owner)
        .values(lease_owner=None, lease_expires_at=None, enqueued_at=None, sends=0)
    )
    return int(res.rowcount or 0)  # type: ignore[attr-defined]


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

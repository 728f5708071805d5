"""CRUD functions over jobs, chunks, items and results. Keyword-only arguments; no HTTP errors."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, insert, or_, select, update
from sqlalchemy.orm import Session

from vlbatch.db.models import (
    TERMINAL_ITEM_STATES,
    Base,
    Chunk,
    Item,
    ItemStatus,
    Job,
    JobStatus,
    Result,
    utcnow,
)


def options_hash(pipeline: str, options: dict[str, Any]) -> str:
    """Stable hash of what shapes a result (processed-with marker)."""
    blob = json.dumps({"pipeline": pipeline, "options": options}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


@dataclass(frozen=True)
class NewItem:
    inputs: dict[str, Any]
    ref: str | None = None


def items_from_paths(paths: Sequence[str], *, images_per_prompt: int) -> list[NewItem]:
    """Group image paths, in order, into items of ``images_per_prompt`` images (a burst per prompt)."""
    k = images_per_prompt
    return [NewItem(inputs={"images": list(paths[i : i + k])}, ref=paths[i]) for i in range(0, len(paths), k)]


def get_job_by_idempotency_key(session: Session, *, key: str) -> Job | None:
    return session.scalars(select(Job).where(Job.idempotency_key == key)).first()


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
) -> Job:
    """Insert a job with its chunks and items in bulk (a 100k-item job in seconds)."""
    job = Job(
        id=uuid.uuid4().hex,
        pipeline=pipeline,
        model=model,
        priority=priority,
        options=options,
        options_hash=options_hash(pipeline, options),
        idempotency_key=idempotency_key,
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
    now = utcnow()
    rows = [
        {
            "job_id": job.id,
            "chunk_id": chunk_ids[i // chunk_size],
            "seq": i,
            "ref": it.ref,
            "inputs": it.inputs,
            "status": ItemStatus.QUEUED,
            "updated_at": now,
        }
        for i, it in enumerate(items)
    ]
    batch = 10_000
    for start in range(0, len(rows), batch):
        session.execute(insert(Item), rows[start : start + batch])
    return job


def rerun_job(session: Session, *, job: Job, scope: str, chunk_size: int) -> Job | None:
    """A new job over ``job``'s inputs: every item (``all``) or those that did not succeed (``missing``)."""
    stmt = select(Item.inputs, Item.ref).where(Item.job_id == job.id)
    if scope == "missing":
        stmt = stmt.where(Item.status != ItemStatus.SUCCEEDED)
    items = [NewItem(inputs=inputs, ref=ref) for inputs, ref in session.execute(stmt.order_by(Item.seq))]
    if not items:
        return None
    return create_job(
        session,
        pipeline=job.pipeline,
        model=job.model,
        options=job.options,
        items=items,
        chunk_size=chunk_size,
        priority=job.priority,
        output_dir=job.output_dir,
    )


def get_job(session: Session, *, job_id: str) -> Job | None:
    return session.get(Job, job_id)


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


def list_results(session: Session, *, job_id: str, after_seq: int, limit: int) -> list[tuple[Item, Result | None]]:
    stmt = (
        select(Item, Result)
        .outerjoin(Result, Result.item_id == Item.id)
        .where(Item.job_id == job_id, Item.seq > after_seq)
        .where(Item.status.in_([ItemStatus.SUCCEEDED, ItemStatus.FAILED]))
        .order_by(Item.seq)
        .limit(limit)
    )
    return [(i, r) for i, r in session.execute(stmt).tuples()]


def cancel_job(session: Session, *, job_id: str) -> int:
    """Cancel every item not yet terminal; running items lose their result when they finish."""
    res = session.execute(
        update(Item)
        .where(Item.job_id == job_id, Item.status.in_([ItemStatus.QUEUED, ItemStatus.RUNNING]))
        .values(status=ItemStatus.CANCELLED, updated_at=utcnow())
    )
    session.execute(update(Job).where(Job.id == job_id).values(status=JobStatus.CANCELLED, finished_at=utcnow()))
    return int(res.rowcount or 0)  # type: ignore[attr-defined]


def claim_chunk(session: Session, *, chunk_id: int, owner: str, lease: timedelta) -> list[Item]:
    """Lease a chunk (compare-and-set) and return its unfinished items; [] if another worker owns it."""
    now = utcnow()
    res = session.execute(
        update(Chunk)
        .where(
            Chunk.id == chunk_id,
            Chunk.done.is_(False),
            or_(Chunk.lease_owner.is_(None), Chunk.lease_owner == owner, Chunk.lease_expires_at < now),
        )
        .values(lease_owner=owner, lease_expires_at=now + lease)
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
    values = {
        "item_id": outcome.item_id,
        "job_id": outcome.job_id,
        "output": outcome.output,
        "raw_text": outcome.raw_text,
        "prompt_tokens": outcome.prompt_tokens,
        "completion_tokens": outcome.completion_tokens,
        "model": model,
        "model_revision": model_revision,
        "pipeline_version": pipeline_version,
        "options_hash": options_hash,
        "created_at": utcnow(),
    }
    session.execute(upsert(session, Result, values, keys=["item_id"]))
    return True


def finish_chunk(session: Session, *, chunk_id: int, owner: str) -> None:
    """Mark the chunk done if none of its items is left, and the job finished if it was the last."""
    left = session.scalar(
        select(func.count())
        .select_from(Item)
        .where(Item.chunk_id == chunk_id, Item.status.not_in(list(TERMINAL_ITEM_STATES)))
    )
    chunk = session.get(Chunk, chunk_id)
    if chunk is None:
        return
    if not left:
        chunk.done = True
    chunk.lease_owner = None
    chunk.lease_expires_at = None
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


def chunks_to_enqueue(session: Session, *, now: datetime, stale_after: timedelta, limit: int) -> list[Chunk]:
    """Chunks the queue may have lost: never sent, sent long ago and unclaimed, or with an expired lease."""
    stmt = (
        select(Chunk)
        .join(Job, Job.id == Chunk.job_id)
        .where(Chunk.done.is_(False), Job.status.in_([JobStatus.QUEUED, JobStatus.RUNNING]))
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


def mark_enqueued(session: Session, *, chunk_ids: Sequence[int]) -> None:
    if chunk_ids:
        session.execute(update(Chunk).where(Chunk.id.in_(list(chunk_ids))).values(enqueued_at=utcnow()))


def chunks_of(session: Session, *, job_id: str) -> list[int]:
    return list(session.scalars(select(Chunk.id).where(Chunk.job_id == job_id).order_by(Chunk.seq)))


def upsert(session: Session, table: type[Base], values: dict[str, Any], *, keys: list[str]) -> Any:
    """INSERT ... ON CONFLICT (keys) DO UPDATE, for the two dialects we run on."""
    from sqlalchemy.dialects import postgresql, sqlite

    dialect = session.get_bind().dialect.name
    module: Any = postgresql if dialect == "postgresql" else sqlite
    stmt = module.insert(table).values(**values)
    return stmt.on_conflict_do_update(index_elements=keys, set_={k: v for k, v in values.items() if k not in keys})

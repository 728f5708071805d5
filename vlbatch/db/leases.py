"""Chunk leases: claim a chunk with a compare-and-set on its owner, renew, release, finish.

A chunk is worked on only under a lease that has not expired, and only its owner may finish it (invariants 2 and 3
in docs/invariants.md). Keyword-only arguments; no HTTP errors."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

from sqlalchemy import case, delete, or_, select, update
from sqlalchemy.orm import Session

from vlbatch.db import webhooks
from vlbatch.db.models import (
    TERMINAL_ITEM_STATES,
    Chunk,
    Item,
    ItemStatus,
    Job,
    JobStatus,
    Result,
    utcnow,
)
from vlbatch.db.queues import queue_paused
from vlbatch.errors import ENGINE_CRASH


def claim_chunk(
    session: Session, *, chunk_id: int, owner: str, lease: timedelta, model: str | None = None
) -> list[Item]:
    """Lease a chunk (compare-and-set) and return its unfinished items; [] if another worker owns it, or (with
    ``model``, the model the caller serves) when the chunk's job asks for another model: a message that reached
    the wrong worker leaves the chunk unclaimed, and the reconciler sends it again to its own model's queue."""
    now = utcnow()
    if not lease_chunk(session, chunk_id=chunk_id, owner=owner, lease=lease, now=now, model=model):
        return []
    return take_items(session, chunk_id=chunk_id, now=now)


def lease_chunk(
    session: Session,
    *,
    chunk_id: int,
    owner: str,
    lease: timedelta,
    now: datetime,
    free_only: bool = False,
    model: str | None = None,
) -> bool:
    """The compare-and-set of a claim: True when ``owner`` now holds the chunk. It wins only on a chunk not done,
    of a job neither paused nor on a paused queue (nor, given ``model``, of another model), with no owner, an
    expired lease, or (unless ``free_only``: a chunk chosen in place of the delivered one, ``claim_order``) this
    same owner."""
    holders = [Chunk.lease_owner.is_(None), Chunk.lease_expires_at < now]
    if not free_only:
        holders.append(Chunk.lease_owner == owner)
    other_model = [] if model is None else [Job.model != model]
    res = session.execute(
        update(Chunk)
        .where(
            Chunk.id == chunk_id,
            Chunk.done.is_(False),
            or_(*holders),
            # A paused job's chunks are not claimed, nor those of any job on a paused queue; the message is
            # dropped and resume_job / queues.resume_queue send them again.
            ~select(Job.id)
            .where(Job.id == Chunk.job_id, or_(Job.status == JobStatus.PAUSED, queue_paused(), *other_model))
            .exists(),
        )
        .values(lease_owner=owner, lease_expires_at=now + lease, sends=0, claimed_at=now)
    )
    return bool(res.rowcount)  # type: ignore[attr-defined]


def take_items(session: Session, *, chunk_id: int, now: datetime) -> list[Item]:
    """A leased chunk's unfinished items, marked running (the job with them, on its first claim). The items are
    leased and read back by one statement: a claim is paid per chunk, in round trips."""
    items = sorted(
        session.scalars(
            update(Item)
            .where(Item.chunk_id == chunk_id, Item.status.in_([ItemStatus.QUEUED, ItemStatus.RUNNING]))
            .values(status=ItemStatus.RUNNING, attempts=Item.attempts + 1, updated_at=now)
            .returning(Item)
            .execution_options(populate_existing=True)
        ),
        key=lambda item: item.seq,
    )
    # The job is read (its claimer wants it next, from the session) and marked started only on its first claim.
    job = session.get(Job, items[0].job_id) if items else None
    if job is not None and job.started_at is None:
        session.execute(
            update(Job)
            .where(Job.id == job.id, Job.started_at.is_(None))
            .values(started_at=now, status=JobStatus.RUNNING)
        )
    return items


def finish_chunk(session: Session, *, chunk_id: int, owner: str) -> bool:
    """Mark the chunk done if none of its items is left, and the job finished if it was the last.

    Only the lease's owner may finish it: a worker whose lease was taken over must not wipe the new
    owner's lease. A chunk with items left is handed back (no owner, not enqueued) for the reconciler to
    send again. Returns whether the chunk is done.
    """
    # One statement reads whether items are left and hands the chunk on: a finish is paid in round trips.
    left = select(Item.id).where(Item.chunk_id == chunk_id, Item.status.not_in(list(TERMINAL_ITEM_STATES))).exists()
    # Compare-and-set on the owner: between this worker's read and its write another one may have taken
    # the chunk over, and its live lease must stay. A chunk with items left is not enqueued (and its sends reset).
    row = session.execute(
        update(Chunk)
        .where(Chunk.id == chunk_id, or_(Chunk.lease_owner.is_(None), Chunk.lease_owner == owner))
        .values(
            done=~left,
            lease_owner=None,
            lease_expires_at=None,
            enqueued_at=case((left, None), else_=Chunk.enqueued_at),
            sends=case((left, 0), else_=Chunk.sends),
        )
        .returning(Chunk.job_id, Chunk.done)
    ).one_or_none()
    if row is None or not row.done:
        return False
    # Whether any item of the job is left, not how many: a count reads every unfinished item of the job, per
    # chunk finished, which on a million-item job is quadratic. The states are named (not "not terminal") so
    # the (job_id, status) index answers with its first entry.
    job_left = (
        select(Item.id)
        .where(Item.job_id == row.job_id, Item.status.in_([ItemStatus.QUEUED, ItemStatus.RUNNING]))
        .exists()
    )
    ended = session.execute(
        update(Job)
        .where(Job.id == row.job_id, Job.status != JobStatus.CANCELLED, Job.status != JobStatus.FINISHED, ~job_left)
        .values(status=JobStatus.FINISHED, finished_at=utcnow())
    )
    if ended.rowcount:  # type: ignore[attr-defined]
        # The outbox: the event is written in the transaction that ends the job, after its last result.
        webhooks.job_ended(session, job_id=row.job_id)
    return True


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


def record_crashes(session: Session, *, item_id: int, crash_count: int) -> None:
    """Book the engine crashes an item caused running alone; kept across redeliveries, given back by ``uncharge``
    when the breaker finds the deployment broken."""
    session.execute(update(Item).where(Item.id == item_id).values(crash_count=crash_count))


def uncharge(session: Session, *, charges: Mapping[int, int]) -> int:
    """Give back crash counts a broken deployment charged to items (item id: crashes to take back). An item the
    charges failed as ``engine_crash`` goes back to queued (its result row removed, its chunk not done, its job
    running again): the crashes were the engine's, not the item's. Returns how many items went back to queued."""
    requeued = 0
    for item_id, n in charges.items():
        item = session.get(Item, item_id)
        if item is None:
            continue
        item.crash_count = max(0, item.crash_count - n)
        if item.status == ItemStatus.FAILED and item.error_code == ENGINE_CRASH:
            item.status, item.error_code, item.error_message, item.written_seq = ItemStatus.QUEUED, None, None, None
            item.updated_at = utcnow()
            session.execute(delete(Result).where(Result.item_id == item_id))
            session.execute(
                update(Chunk)
                .where(Chunk.id == item.chunk_id, Chunk.done.is_(True))
                .values(done=False, lease_owner=None, lease_expires_at=None, enqueued_at=None, sends=0)
            )
            session.execute(
                update(Job)
                .where(Job.id == item.job_id, Job.status == JobStatus.FINISHED)
                .values(status=JobStatus.RUNNING, finished_at=None)
            )
            requeued += 1
    return requeued


def hand_back(session: Session, *, chunk_ids: Sequence[int], owner: str, charges: Mapping[int, int]) -> int:
    """A broken deployment hands its held chunks back: no owner, not enqueued (the reconciler sends them again),
    their running items queued again, and the crash charges given back (``uncharge``). Returns how many failed
    items went back to queued."""
    if chunk_ids:
        release_chunks(session, chunk_ids=chunk_ids, owner=owner)
        session.execute(
            update(Item)
            .where(Item.chunk_id.in_(list(chunk_ids)), Item.status == ItemStatus.RUNNING)
            .values(status=ItemStatus.QUEUED, updated_at=utcnow())
        )
    return uncharge(session, charges=charges)

"""Each worker's engine as its breaker sees it (``EngineState``), and the crash charges a broken deployment gives
back (``uncharge``). The worker writes; the API reads for /readyz, a job's ``stalled`` and the metrics.
Keyword-only arguments; no HTTP errors."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from vlbatch.db.leases import release_chunks
from vlbatch.db.models import Chunk, EngineState, Item, ItemStatus, Job, JobStatus, Result, utcnow
from vlbatch.errors import ENGINE_CRASH

__all__ = [
    "BROKEN",
    "OK",
    "Broken",
    "broken_engines",
    "forget",
    "hand_back",
    "open_breakers",
    "report",
    "stalled_reason",
    "uncharge",
]

OK = "ok"
BROKEN = "broken"
# A broken row not refreshed for this long belongs to a worker that died without removing it: ignored. A worker
# whose breaker is open rewrites its row at every reload attempt, at most ``breaker_backoff_max_s`` apart.
STALE_AFTER = timedelta(hours=1)


@dataclass(frozen=True)
class Broken:
    owner: str
    model: str
    reason: str
    since: datetime

    def message(self) -> str:
        return f"the engine of worker {self.owner} {self.reason} since {self.since:%Y-%m-%d %H:%M:%S} UTC"


def report(session: Session, *, owner: str, model: str, state: str, reason: str | None = None) -> None:
    """Record the worker's engine state; ``since`` moves only when the state changes."""
    now = utcnow()
    row = session.get(EngineState, owner)
    if row is None:
        session.add(EngineState(owner=owner, model=model, state=state, reason=reason, since=now, updated_at=now))
        return
    if row.state != state:
        row.since = now
    row.model, row.state, row.reason, row.updated_at = model, state, reason, now


def forget(session: Session, *, owner: str) -> None:
    """The worker stops: it serves nothing any more."""
    session.execute(delete(EngineState).where(EngineState.owner == owner))


def open_breakers(session: Session, *, model: str | None = None) -> list[Broken]:
    """Every worker's broken engine (of ``model``), but for rows gone stale (their worker died)."""
    rows = session.scalars(
        select(EngineState).where(EngineState.state == BROKEN, *([EngineState.model == model] if model else []))
    )
    now = utcnow()
    return [
        Broken(r.owner, r.model, r.reason or "fails", r.since.replace(tzinfo=now.tzinfo))
        for r in rows
        if now - r.updated_at.replace(tzinfo=now.tzinfo) < STALE_AFTER
    ]


def broken_engines(session: Session, *, model: str | None = None) -> list[Broken]:
    """Broken engines (of ``model``), unless another worker serves the model fine: then the deployment moves."""
    served = set(session.scalars(select(EngineState.model).where(EngineState.state == OK)))
    return [b for b in open_breakers(session, model=model) if b.model not in served]


def stalled_reason(session: Session, *, model: str) -> str | None:
    """Why a job on ``model`` does not move, when every worker serving it is broken; None otherwise."""
    broken = broken_engines(session, model=model)
    return "; ".join(b.message() for b in broken) or None


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

"""Each worker's engine as its breaker sees it (``EngineState``). The worker writes; the API reads for /readyz, a
job's ``stalled`` and the metrics. (What a broken deployment hands back, its chunks and its crash charges, is the
leases module's: ``leases.hand_back``.) Keyword-only arguments; no HTTP errors."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from vlbatch.db import webhooks
from vlbatch.db.models import EngineState, utcnow

__all__ = [
    "BROKEN",
    "OK",
    "Broken",
    "broken_engines",
    "forget",
    "open_breakers",
    "report",
    "stalled_reason",
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
    """Record the worker's engine state; ``since`` moves only when the state changes. The breaker that leaves no
    engine of the model working owes ``job.stalled`` for each of the model's open jobs (the outbox)."""
    now = utcnow()
    moving = state == BROKEN and not broken_engines(session, model=model)
    row = session.get(EngineState, owner)
    if row is None:
        session.add(EngineState(owner=owner, model=model, state=state, reason=reason, since=now, updated_at=now))
    else:
        if row.state != state:
            row.since = now
        row.model, row.state, row.reason, row.updated_at = model, state, reason, now
    if moving:
        session.flush()
        why = stalled_reason(session, model=model)
        if why is not None:  # this breaker stopped the model's last working engine: its open jobs stall
            webhooks.jobs_stalled(session, model=model, reason=why)


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

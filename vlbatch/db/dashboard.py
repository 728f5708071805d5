"""The reads behind the dashboard's pages that no other store module answers: a job's finish times for its progress
chart. Keyword-only arguments; no HTTP errors."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from vlbatch.db.models import TERMINAL_ITEM_STATES, Item

__all__ = ["finish_times"]


def finish_times(session: Session, *, job_id: str, step: int) -> list[datetime]:
    """When the job's finished items finished, every ``step``-th item by seq (all of them for step 1), unsorted."""
    stmt = select(Item.updated_at).where(Item.job_id == job_id, Item.status.in_(list(TERMINAL_ITEM_STATES)))
    if step > 1:
        stmt = stmt.where(Item.seq % step == 0)
    return list(session.scalars(stmt))

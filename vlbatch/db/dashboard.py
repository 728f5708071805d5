"""The reads behind the dashboard's pages that no other store module answers: a job's finish times for its progress
chart, a page of its items with their results, its tags, its failures and its chips' readings. Keyword-only
arguments; no HTTP errors."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from vlbatch.db.models import TERMINAL_ITEM_STATES, DeviceSample, Item, ItemStatus, Result
from vlbatch.db.results import ResultRecord, record, select_records

__all__ = ["failures", "finish_times", "item_page", "job_chip_samples", "result_tags"]


def finish_times(session: Session, *, job_id: str, step: int) -> list[datetime]:
    """When the job's finished items finished, every ``step``-th item by seq (all of them for step 1), unsorted."""
    stmt = select(Item.updated_at).where(Item.job_id == job_id, Item.status.in_(list(TERMINAL_ITEM_STATES)))
    if step > 1:
        stmt = stmt.where(Item.seq % step == 0)
    return list(session.scalars(stmt))


def job_chip_samples(session: Session, *, job_id: str, limit: int = 200) -> Sequence[DeviceSample]:
    """The job's newest chip readings, newest first."""
    stmt = select(DeviceSample).where(DeviceSample.job_id == job_id).order_by(DeviceSample.id.desc()).limit(limit)
    return session.scalars(stmt).all()


def item_page(
    session: Session, *, job_id: str, after: int, limit: int, error: str | None = None, succeeded_only: bool = False
) -> list[ResultRecord]:
    """The job's items after seq ``after``, in order, as records with their inputs: those failed with ``error`` when
    given, else the succeeded ones with ``succeeded_only``."""
    stmt = select_records(with_inputs=True).where(Item.job_id == job_id, Item.seq > after).order_by(Item.seq)
    if error:
        stmt = stmt.where(Item.error_code == error)
    elif succeeded_only:
        stmt = stmt.where(Item.status == ItemStatus.SUCCEEDED)
    return [record(row) for row in session.execute(stmt.limit(limit)).tuples()]


def result_tags(session: Session, *, job_id: str, limit: int) -> list[ResultRecord]:
    """The job's first ``limit`` results, as records (their ``tag_names`` are what the filter counts)."""
    stmt = select_records().where(Result.job_id == job_id).limit(limit)
    return [record(row) for row in session.execute(stmt).tuples()]


def failures(session: Session, *, job_id: str, limit: int) -> list[tuple[str | None, str | None]]:
    """(error code, message) of the job's first ``limit`` failed items, in order."""
    stmt = (
        select(Item.error_code, Item.error_message)
        .where(Item.job_id == job_id, Item.status == ItemStatus.FAILED)
        .order_by(Item.seq)
        .limit(limit)
    )
    return list(session.execute(stmt).tuples())

"""The outcome writer: items' outcomes, their results rows with the processed-with marker, and write positions.

Results are read back as records through ``vlbatch.db.results``. Keyword-only arguments; no HTTP errors."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from vlbatch.db.bulk import upsert_many
from vlbatch.db.models import (
    Item,
    ItemStatus,
    Job,
    Result,
    TagEdit,
    utcnow,
)
from vlbatch.db.tags import edits_for, merged_tags


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
    content_hash: str | None = None  # of an image item's bytes: what a later duplicate finds it by
    reused_from: int | None = None  # the item whose answer this is, when the engine was not asked again


@dataclass(frozen=True)
class Marker:
    """What a result was processed with (invariant 7)."""

    model: str
    model_revision: str | None
    pipeline_version: str
    options_hash: str


def result_row(outcome: Outcome, marker: Marker, edits: Sequence[TagEdit], *, now: datetime) -> dict[str, Any]:
    """The ``results`` row of an outcome, with its marker and its tags merged with the item's ``edits``: what
    ``record_outcomes`` upserts."""
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
        "content_hash": outcome.content_hash,
        "reused_from": outcome.reused_from,
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

"""The outcome writer: items' outcomes, their results rows with the processed-with marker, and write positions.

Results are read back as records through ``vlbatch.db.results``. Keyword-only arguments; no HTTP errors."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import datetime
from operator import attrgetter
from typing import Any

from sqlalchemy import case, literal_column, select, update
from sqlalchemy.orm import Session

from vlbatch.db.bulk import upsert_many
from vlbatch.db.leases import finish_chunk
from vlbatch.db.models import (
    Item,
    ItemStatus,
    Job,
    Result,
    TagEdit,
    utcnow,
)
from vlbatch.db.outcome_statement import write_batch
from vlbatch.db.result_fields import RESULT_FIELDS
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
    prompt_hash: str | None = None  # of the prompt text the engine answered (``worker.rounds.prompt_hash``)


@dataclass(frozen=True)
class Marker:
    """What a result was processed with (invariant 7)."""

    model: str
    model_revision: str | None
    pipeline_version: str
    options_hash: str


def _getter(source: str) -> tuple[tuple[str, ...], Callable[[Any], tuple[Any, ...]]]:
    """The names of the fields read from ``source`` and one C-level getter of all of their values, as a tuple."""
    names = tuple(f.name for f in RESULT_FIELDS if f.source == source)
    get = attrgetter(*names)
    return names, (get if len(names) > 1 else lambda obj: (get(obj),))


_OUTCOME_FIELDS, _outcome_values = _getter("outcome")
_MARKER_FIELDS, _marker_values = _getter("marker")
_CLOCK_FIELDS = tuple(f.name for f in RESULT_FIELDS if f.source == "now")
_TAG_FIELDS = tuple(f.name for f in RESULT_FIELDS if f.source == "tags")


def _row(outcome: Outcome, marker: Marker, now: Any, tags: Any) -> dict[str, Any]:
    """The row over ``RESULT_FIELDS``, built per outcome on the writer's thread: one ``attrgetter`` call per source
    (a loop of ``getattr`` over the fields costs a third more)."""
    row = dict(zip(_OUTCOME_FIELDS, _outcome_values(outcome), strict=True))
    row.update(zip(_MARKER_FIELDS, _marker_values(marker), strict=True))
    row.update(dict.fromkeys(_CLOCK_FIELDS, now))
    row.update(dict.fromkeys(_TAG_FIELDS, tags))
    return row


_JSON_FIELDS = tuple(f for f in RESULT_FIELDS if f.json and f.source != "now")
_NOW_FIELDS = tuple(f.name for f in RESULT_FIELDS if f.source == "now")


def result_row(outcome: Outcome, marker: Marker, edits: Sequence[TagEdit], *, now: datetime) -> dict[str, Any]:
    """The ``results`` row of an outcome (``RESULT_FIELDS``), with its marker and its tags merged with the item's
    ``edits``: what ``record_outcomes`` upserts."""
    return _row(outcome, marker, now, merged_tags(outcome.output, edits))


def record_outcomes(session: Session, *, outcomes: Sequence[Outcome], markers: dict[str, Marker]) -> list[int]:
    """Finish many items at once, idempotently: each moves only from running (a cancelled item or a
    redelivered duplicate is left alone) and its result row is upserted, its tags merged with the operator's
    edits (``vlbatch.db.tags``: the model's tags are replaced, the person's kept). ``markers`` by job id.
    Returns the ids that moved.

    On PostgreSQL a batch is one statement (``vlbatch.db.outcome_statement``) plus, for items with tag edits, the
    per-job path; on SQLite it is the per-job path: per job, one UPDATE that takes its write positions (and holds
    its row) and one that finishes its items; then the edits of edited items, if any, and one multi-row upsert of
    the results. Round trips are what the writer pays for: it is a thread, and after each one it waits for the
    interpreter lock and a core while the feeder prepares the next requests."""
    if not outcomes:
        return []
    now = utcnow()
    if session.get_bind().dialect.name == "postgresql":
        done = write_batch(session, rows=batch_rows(outcomes, markers), now=now)
        fast = done.moved
        outcomes = [o for o in outcomes if o.item_id in done.edited]  # at the positions it reserved for them
        return sorted(fast + _record_per_job(session, outcomes=outcomes, markers=markers, now=now, at=done.edited))
    return sorted(_record_per_job(session, outcomes=outcomes, markers=markers, now=now))


def write_outcomes(
    sessions: Callable[[], Session],
    *,
    outcomes: Sequence[Outcome],
    markers: dict[str, Marker],
    moved: set[int],
    finish: Sequence[int] = (),
    owner: str = "",
    finished: set[int] | None = None,
    statements: Session | None = None,
) -> None:
    """``record_outcomes`` committed, and the chunks of ``finish`` (those whose last items ``outcomes`` hold)
    finished as ``owner`` (``leases.finish_chunk``), in as few round trips as the database allows: the writer's
    call. Adds the ids each committed step moved to ``moved``, and the chunks it finished to ``finished``, so a
    caller retrying after a failure (with the same sets) loses none and finishes none twice.

    On PostgreSQL the one statement runs as its own transaction (a statement is atomic: no BEGIN and COMMIT to
    wait for) and finishes most chunks too (``outcome_statement``); then the items with tag edits and the chunks it
    left, if any, in a transaction of its own (it takes positions of its own and commits after the batch, so no
    reader's cursor has passed them); until it commits they stay running and their chunks held, as after any lost
    write. ``statements``: a PostgreSQL session in autocommit that the caller keeps between writes for the
    statement, so a write takes no connection from the pool (and pays no pre-ping round trip). On SQLite, one
    transaction."""
    finished = set() if finished is None else finished
    with ExitStack() as stack:
        s = statements if statements is not None else stack.enter_context(sessions())
        if s.get_bind().dialect.name == "postgresql" and outcomes:
            if statements is None:
                s.connection(execution_options={"isolation_level": "AUTOCOMMIT"})
            chunks = [c for c in finish if c not in finished]
            done = write_batch(s, rows=batch_rows(outcomes, markers), now=utcnow(), finish=chunks, owner=owner)
            moved.update(done.moved)
            finished.update(done.finished)
            left = set(done.edited)
            outcomes = [o for o in outcomes if o.item_id in left]
    chunks = [c for c in finish if c not in finished]
    if not outcomes and not chunks:
        return
    with sessions() as s:
        rest = record_outcomes(s, outcomes=outcomes, markers=markers)
        for chunk_id in chunks:  # after the items: it reads what is left of each chunk and job
            finish_chunk(s, chunk_id=chunk_id, owner=owner)
        s.commit()
    moved.update(rest)
    finished.update(chunks)


def _record_per_job(
    session: Session,
    *,
    outcomes: Sequence[Outcome],
    markers: dict[str, Marker],
    now: datetime,
    at: dict[int, int] | None = None,
) -> list[int]:
    """``record_outcomes`` as a few statements per job: on SQLite, and for items with tag edits (``at``: their
    write positions, reserved already by the batch's statement in this transaction)."""
    if not outcomes:
        return []
    by_job: dict[str, dict[int, Outcome]] = {}
    for o in outcomes:
        by_job.setdefault(o.job_id, {})[o.item_id] = o
    moved: list[Outcome] = []
    edited: list[int] = []
    for job_id in sorted(by_job):  # in id order, the order cancel and retry take jobs in: no crosswise waits
        batch = [by_job[job_id][item_id] for item_id in sorted(by_job[job_id])]
        if at is None:
            first = take_positions(session, job_id=job_id, count=len(batch))
            if first is None:
                continue  # the job is gone (deleted with its items)
            positions = {o.item_id: first + k for k, o in enumerate(batch)}
        else:
            positions = {o.item_id: at[o.item_id] for o in batch}
        for item_id, has_edits in finish_items(session, outcomes=batch, positions=positions, now=now):
            moved.append(by_job[job_id][item_id])
            if has_edits:
                edited.append(item_id)
    edits = edits_for(session, item_ids=edited) if edited else {}
    rows = [result_row(o, markers[o.job_id], edits.get(o.item_id, []), now=now) for o in moved]
    for start in range(0, len(rows), 500):
        session.execute(upsert_many(session, Result, rows[start : start + 500], keys=["item_id"]))
    return [o.item_id for o in moved]


def batch_rows(outcomes: Sequence[Outcome], markers: dict[str, Marker]) -> list[dict[str, Any]]:
    """The rows of ``outcome_statement.write_batch``: one per item (a duplicate in the batch once), numbered
    within their job in id order, tags the model's alone; a result's fields as ``result_row`` has them, json ones as
    text, but the clock's (the statement's ``:now``)."""
    unique = {o.item_id: o for o in outcomes}
    rows = []
    for job_id in sorted({o.job_id for o in unique.values()}):
        mine = sorted((o for o in unique.values() if o.job_id == job_id), key=lambda o: o.item_id)
        marker = markers[job_id]
        for k, o in enumerate(mine):
            failed = bool(o.error_code)
            row: dict[str, Any] = {
                "k": k,
                "status": (ItemStatus.FAILED if failed else ItemStatus.SUCCEEDED).value,
                "error_code": o.error_code if failed else None,
                "error_message": o.error_message if failed else None,
            }
            row.update(_row(o, marker, None, merged_tags(o.output, [])))
            for name in _NOW_FIELDS:
                del row[name]
            for f in _JSON_FIELDS:
                value = row[f.name]
                if value is not None or f.json_null:  # the column's None is SQL NULL unless it stores JSON null
                    row[f.name] = json.dumps(value)
            rows.append(row)
    return rows


def take_positions(session: Session, *, job_id: str, count: int) -> int | None:
    """Reserve ``count`` write positions of the job; returns the first (None: the job is gone).

    The UPDATE holds the job's row until this transaction commits, before any of its items is touched (the
    order cancel and retry take them in), so a transaction that takes positions after this one also commits
    after it: a reader paging by position never sees a position before all the ones below it are visible, and
    an item finishing out of seq order is never behind a reader's cursor. An outcome that does not move its item
    (a duplicate, a cancelled item) leaves its position unused: positions order results, they do not count them.
    SQLite has one writer at a time anyway."""
    end = session.scalar(
        update(Job)
        .where(Job.id == job_id)
        .values(results_written=Job.results_written + count)
        .returning(Job.results_written)
    )
    return None if end is None else end - count


def finish_items(
    session: Session, *, outcomes: Sequence[Outcome], positions: dict[int, int], now: datetime
) -> list[tuple[int, bool]]:
    """One UPDATE moving the running items among ``outcomes`` (one job's, in id order) to succeeded or failed,
    with their write positions from ``first_position`` on; returns (item id, whether it has tag edits) for each
    item it moved."""
    moved: list[tuple[int, bool]] = []
    # Qualified by hand: SQLAlchemy writes RETURNING's columns bare, which a correlated subquery cannot tell apart.
    has_edits = select(TagEdit.item_id).where(TagEdit.item_id == literal_column("items.id")).exists()
    for start in range(0, len(outcomes), 1000):  # a few parameters a row: under SQLite's bound-parameter limit
        part = outcomes[start : start + 1000]
        # CASE on the id, not a join with a VALUES list: the planners then look each item up by its key.
        values: dict[str, Any] = {
            "written_seq": case({o.item_id: positions[o.item_id] for o in part}, value=Item.id),
            "status": ItemStatus.SUCCEEDED,
            "error_code": None,
            "error_message": None,
            "updated_at": now,
        }
        failed = [o for o in part if o.error_code]
        if failed:
            values["status"] = case(
                {o.item_id: ItemStatus.FAILED.value for o in failed}, value=Item.id, else_=ItemStatus.SUCCEEDED.value
            )
            values["error_code"] = case({o.item_id: o.error_code for o in failed}, value=Item.id, else_=None)
            values["error_message"] = case({o.item_id: o.error_message for o in failed}, value=Item.id, else_=None)
        moved.extend(
            (item_id, bool(edited))
            for item_id, edited in session.execute(
                update(Item)
                .where(Item.id.in_([o.item_id for o in part]), Item.status == ItemStatus.RUNNING)
                .values(**values)
                .returning(Item.id, has_edits)
            )
        )
    return moved

"""The outcome writer's batch as one statement on PostgreSQL: write positions, items finished and results upserted
by a single round trip, with the rows passed as one JSON parameter so the SQL text never changes (parsed and
compiled once, whatever the batch's size).

Why one statement: the writer is a thread in a process whose other threads prepare requests, on a host whose
cores the engine keeps busy. Every round trip ends with a wait for the interpreter lock and for a core, which
costs more than the SQL itself (``benchmarks/outcome_writer.py --busy``). The per-job statements of
``vlbatch.db.outcomes`` remain for SQLite (no data-modifying CTEs there) and for items whose tags an operator
edited (rare; their merge needs the edits read back first).

The lock order is the protocol's (``outcomes.take_positions``): the jobs' rows, in id order, before any of their
items. ``locked`` takes them; an item row is only updated once its job's positions are taken (``moved`` joins
``pos``).

The same statement finishes the chunks whose last items it writes (``finish``), as ``leases.finish_chunk`` would
(only the lease's owner; a chunk with items left handed back), so a chunk's end costs no round trip of its own. It
leaves a chunk to ``finish_chunk`` (the caller's next transaction) when that needs the freshest view or a wait:

- a chunk with an edited item (its item is written after);
- a chunk of a job that ends with this batch: the job's end and its webhook event are ``finish_chunk``'s, in one
  transaction;
- a chunk of a job another writer wrote since the statement's snapshot. All parts of a statement read one snapshot,
  taken before it waits for the jobs' locks: a writer of the same job that commits in that wait is invisible to
  them, and two such writers could each count the other's items as open, mark their chunks done and leave the job
  unended. Every writer moves ``jobs.results_written`` under that lock, so the statement sees it: the snapshot's
  value (``seen``) is not the one its own UPDATE started from (``pos``);
- a chunk another transaction holds locked (a claim, a hand-back, another worker's finish): those take a chunk
  before its items and job, and the statement, which holds those already, must not wait for it.

Keyword-only arguments; no HTTP errors."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value
from sqlalchemy.orm.util import identity_key

from vlbatch.db.models import Item, ItemStatus
from vlbatch.db.result_fields import RESULT_FIELDS, ResultField

# The result's fields a row of the statement carries (``outcomes.batch_rows``): all but the clock's, which is
# ``:now``; json ones as text, cast.
BATCH_FIELDS = tuple(f for f in RESULT_FIELDS if f.source != "now")


def _value(f: ResultField) -> str:
    if f.source == "now":
        return ":now"
    return f"CAST(v.{f.name} AS json)" if f.json else f"v.{f.name}"


# Items with tag edits are left running for the caller's per-job path; every other running item is finished. Of
# the chunks to finish, ``due`` are the statement's (see the docstring; a locked one is skipped, never waited for).
# ``closing`` tells, as ``finish_chunk`` does, whether items are left, not counting those ``moved`` (the snapshot
# still shows them running); materialized, so it is asked once per chunk, not once per column set from it. The
# chunks' ids come as an array (``:finish``), which the planner looks up by key: a set-returning function's
# guessed hundred rows had it scan every chunk of the table.
# Built from ``RESULT_FIELDS`` once, at import: the SQL text never changes.
_BATCH_SQL = """
WITH v AS (
    SELECT * FROM json_to_recordset(CAST(:rows AS json)) AS v(
        k integer, status text, error_code text, error_message text, {recordset})
),
counts AS (SELECT job_id, count(*) AS n FROM v GROUP BY job_id),
locked AS (SELECT id FROM jobs WHERE id IN (SELECT job_id FROM counts) ORDER BY id FOR UPDATE),
pos AS (
    UPDATE jobs SET results_written = jobs.results_written + counts.n
    FROM counts
    WHERE jobs.id = counts.job_id AND jobs.id IN (SELECT id FROM locked)
    RETURNING jobs.id AS job_id, jobs.results_written - counts.n AS first
),
edited AS (
    SELECT v.item_id, pos.first + v.k AS written_seq FROM v JOIN pos ON pos.job_id = v.job_id
    WHERE EXISTS (SELECT 1 FROM tag_edits e WHERE e.item_id = v.item_id)
),
moved AS (
    UPDATE items SET
        status = v.status, written_seq = pos.first + v.k, error_code = v.error_code,
        error_message = v.error_message, updated_at = :now
    FROM v JOIN pos ON pos.job_id = v.job_id
    WHERE items.id = v.item_id AND items.status = :running AND v.item_id NOT IN (SELECT item_id FROM edited)
    RETURNING items.id, items.status, items.written_seq, items.error_code, items.error_message
),
written AS (
    INSERT INTO results ({columns})
    SELECT {values}
    FROM v JOIN moved ON moved.id = v.item_id
    ON CONFLICT (item_id) DO UPDATE SET {updates}
),
seen AS (SELECT id, results_written FROM jobs WHERE id IN (SELECT job_id FROM counts)),
due AS (
    SELECT chunks.id FROM chunks
    JOIN pos ON pos.job_id = chunks.job_id
    JOIN seen ON seen.id = chunks.job_id AND seen.results_written = pos.first
    WHERE chunks.id = ANY(CAST(:finish AS bigint[]))
    AND EXISTS (
        SELECT 1 FROM items WHERE items.job_id = chunks.job_id AND items.status IN (:queued, :running)
        AND items.id NOT IN (SELECT id FROM moved)
    )
    AND NOT EXISTS (SELECT 1 FROM edited JOIN items ON items.id = edited.item_id WHERE items.chunk_id = chunks.id)
    FOR UPDATE OF chunks SKIP LOCKED
),
closing AS MATERIALIZED (
    SELECT due.id, EXISTS (
        SELECT 1 FROM items WHERE items.chunk_id = due.id AND items.status IN (:queued, :running)
        AND items.id NOT IN (SELECT id FROM moved)
    ) AS left_open
    FROM due
),
finished AS (
    UPDATE chunks SET
        done = NOT closing.left_open, lease_owner = NULL, lease_expires_at = NULL,
        enqueued_at = CASE WHEN closing.left_open THEN NULL ELSE chunks.enqueued_at END,
        sends = CASE WHEN closing.left_open THEN 0 ELSE chunks.sends END
    FROM closing
    WHERE chunks.id = ANY(CAST(:finish AS bigint[])) AND chunks.id = closing.id
    AND (chunks.lease_owner IS NULL OR chunks.lease_owner = :owner)
)
SELECT id, 'moved' AS kind, status, written_seq, error_code, error_message FROM moved
UNION ALL
SELECT edited.item_id, 'edited', NULL, edited.written_seq, NULL, NULL
FROM edited JOIN items ON items.id = edited.item_id AND items.status = :running
UNION ALL
SELECT id, 'finished', NULL, NULL, NULL, NULL FROM due
"""
_BATCH = text(
    _BATCH_SQL.format(
        recordset=", ".join(f"{f.name} {'text' if f.json else f.sql}" for f in BATCH_FIELDS),
        columns=", ".join(f.name for f in RESULT_FIELDS),
        values=", ".join(_value(f) for f in RESULT_FIELDS),
        updates=", ".join(f"{f.name} = EXCLUDED.{f.name}" for f in RESULT_FIELDS if f.name != "item_id"),
    )
)


@dataclass(frozen=True)
class BatchWritten:
    moved: list[int]  # items finished, their results written
    edited: dict[int, int]  # running items with tag edits, left for the per-job path: their reserved positions
    finished: list[int] = field(default_factory=list)  # chunks of ``finish`` whose finish the statement made


def write_batch(
    session: Session,
    *,
    rows: list[dict[str, Any]],
    now: datetime,
    finish: Sequence[int] = (),
    owner: str = "",
) -> BatchWritten:
    """Finish the running items among ``rows`` that have no tag edits and upsert their results, in one statement;
    and finish the chunks of ``finish`` (those whose last items ``rows`` hold) as ``owner``, but those the module's
    docstring leaves to ``leases.finish_chunk``.

    A row has the ``v`` columns above: the item and job ids, ``k`` (its place among the batch's items of its job,
    in id order: its write position is the job's first reserved one plus ``k``), its outcome and marker, ``output``
    as JSON text and ``tags`` (the model's alone, as there are no edits to merge) as JSON text or None."""
    params = {
        "rows": json.dumps(rows),
        "now": now,
        "queued": ItemStatus.QUEUED.value,
        "running": ItemStatus.RUNNING.value,
        "finish": "{" + ",".join(str(int(c)) for c in sorted(finish)) + "}",  # an array literal of ids
        "owner": owner,
    }
    moved: list[int] = []
    edited: dict[int, int] = {}
    finished: list[int] = []
    for row in session.execute(_BATCH, params):
        if row.kind == "finished":
            finished.append(row.id)
            continue
        if row.kind == "edited":
            edited[row.id] = row.written_seq
            continue
        moved.append(row.id)
        # The statement is not the ORM's: an item the caller's session holds is brought up to date, as the ORM's
        # own UPDATE would (the per-job path's), without a reload.
        if (item := session.identity_map.get(identity_key(Item, row.id))) is not None:
            for name in ("status", "written_seq", "error_code", "error_message"):
                set_committed_value(item, name, getattr(row, name))
            set_committed_value(item, "updated_at", now)
    return BatchWritten(moved=sorted(moved), edited=edited, finished=sorted(finished))

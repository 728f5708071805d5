"""The feeder's one result writer: a thread that takes the feeder's events in order, turns them into
outcomes (``take``) and writes those in batches, so each batch costs one transaction
(``outcomes.write_outcomes``: one statement on PostgreSQL). The chunks a batch writes the last items of
(``finishing``) are finished by the same write, not by a transaction each.

A batch is written at ``batch`` outcomes or ``interval_s`` after its first; an outcome of a chunk handed
back meanwhile is dropped (another worker owns the item now). A write that fails because the database is
unreachable is retried with back-off (``until_written``). On PostgreSQL the writer keeps the session its
statement runs on between writes (``Statements``), so a batch is one round trip, not a pool checkout's pre-ping
and the statement.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from vlbatch.db import outcomes
from worker.context import WorkerContext
from worker.held_items import Held
from worker.samples import FeederStats

log = logging.getLogger(__name__)
_T = TypeVar("_T")

Written = tuple[Held, outcomes.Outcome]


def until_written(write: Callable[[], _T], *, what: str, closed: threading.Event) -> _T | None:
    """Run a database write, retrying with back-off while the database is unreachable (a restart or a
    failover): the answers stay held meanwhile, and their leases are renewed once it is back. Gives up
    (None) only once ``closed``; the leases then lapse and another worker redoes the items."""
    wait = 0.5
    while True:
        try:
            return write()
        except SQLAlchemyError as exc:
            if closed.is_set():
                log.error("database unreachable while closing; %s not written: %s", what, exc)
                return None
            log.warning("database write of %s failed, retrying in %.1f s: %s", what, wait, exc)
            time.sleep(wait)
            wait = min(wait * 2, 10.0)


class Statements:
    """The writer's own autocommit session on PostgreSQL, kept between writes: no pool checkout, and so no pre-ping
    round trip, per batch. A write that fails drops it (its connection may be the reason); one left idle for
    ``idle_s`` is given back to the pool before the next write, so a connection a server or a firewall may have
    closed meanwhile is pinged again on its next checkout. None on SQLite (no ping, and one transaction anyway)."""

    def __init__(self, sessions: Callable[[], Session], *, idle_s: float = 10.0) -> None:
        self._sessions = sessions
        self._idle_s = idle_s
        self._held: Session | None = None
        self._used_at = 0.0
        self._postgres: bool | None = None

    def session(self) -> Session | None:
        now = time.monotonic()
        if self._held is not None and now - self._used_at > self._idle_s:
            self.drop()
        if self._held is None and self._postgres is not False:
            s = self._sessions()
            self._postgres = s.get_bind().dialect.name == "postgresql"
            if not self._postgres:
                s.close()
                return None
            try:
                s.connection(execution_options={"isolation_level": "AUTOCOMMIT"})
            except SQLAlchemyError:
                s.close()
                raise
            self._held = s
        self._used_at = now
        return self._held

    def drop(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            try:
                held.close()
            except SQLAlchemyError:  # its connection is gone: the pool has let it go already
                log.debug("the writer's session closed with an error", exc_info=True)


class ResultWriter:
    def __init__(
        self,
        ctx: WorkerContext,
        stats: FeederStats,
        *,
        take: Callable[[tuple[Any, ...]], Written | None],
        released: Callable[[int], bool],
        finishing: Callable[[list[Written]], list[int]],
        written: Callable[[list[Written], set[int], set[int]], None],
        closed: threading.Event,
        batch: int = 256,
        interval_s: float = 0.5,
    ) -> None:
        self.ctx = ctx
        self.stats = stats
        self._take = take  # an event becomes an outcome to write, or None (the item goes on, or is dropped)
        self._released = released  # a chunk handed back: its outcomes are not written
        self._finishing = finishing  # the chunks a batch of outcomes writes the last items of
        self._written = written  # told every batch, which of its items the write moved and which chunks it finished
        self._closed = closed
        self._batch = batch
        self._interval_s = interval_s
        self._events: queue.Queue[tuple[Any, ...] | None] = queue.Queue()
        self._statements = Statements(ctx.sessions)
        self._thread = threading.Thread(target=self._loop, name="feeder-writer", daemon=True)
        self._thread.start()

    def put(self, event: tuple[Any, ...]) -> None:
        self._events.put(event)

    def close(self) -> None:
        """Write what is pending and stop (after ``closed`` is set, a write that fails is given up)."""
        self._events.put(None)
        self._thread.join(30)

    def _loop(self) -> None:
        pending: list[Written] = []
        first_at = 0.0
        while True:
            timeout = self._interval_s - (time.monotonic() - first_at) if pending else None
            try:
                event = self._events.get(timeout=max(0.0, timeout) if timeout is not None else None)
            except queue.Empty:
                event = ()
            if event is None:
                self._flush(pending)
                self._statements.drop()
                return
            outcome = self._take(event) if event else None
            if outcome is not None:
                if not pending:
                    first_at = time.monotonic()
                pending.append(outcome)
            if pending and (len(pending) >= self._batch or time.monotonic() - first_at >= self._interval_s):
                self._flush(pending)
                pending = []

    def _flush(self, pending: list[Written]) -> None:
        if not pending:
            return
        live = [(h, o) for h, o in pending if not self._released(h.chunk_id)]
        started, cpu = time.perf_counter(), time.thread_time()
        moved: set[int] = set()
        finished: set[int] = set()
        if live:
            markers = {h.plan.job.id: h.plan.marker for h, _ in live}
            chunks = self._finishing(live)

            def write() -> None:  # retried whole: what a step committed stays in moved and finished, and is not redone
                try:
                    outcomes.write_outcomes(
                        self.ctx.sessions,
                        outcomes=[o for _, o in live],
                        markers=markers,
                        moved=moved,
                        finish=chunks,
                        owner=self.ctx.owner,
                        finished=finished,
                        statements=self._statements.session(),
                    )
                except SQLAlchemyError:
                    self._statements.drop()
                    raise

            until_written(write, what=f"{len(live)} answers", closed=self._closed)
        self.stats.add_db(time.perf_counter() - started, len(live), time.thread_time() - cpu)
        for _, o in live:
            if o.item_id in moved:
                self.stats.add_done(o.prompt_tokens, o.completion_tokens)
        self._written(pending, moved, finished)

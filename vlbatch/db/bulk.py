"""What the db protocols share: upserts on either dialect, id lists cut under the bound-parameter limits, and
batches written one behind the reading (``one_behind``)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, TypeVar

from sqlalchemy.orm import Session

from vlbatch.db.models import (
    Base,
)

T = TypeVar("T")


def in_batches(rows: Iterator[T], size: int) -> Iterator[list[T]]:
    while batch := list(itertools.islice(rows, size)):
        yield batch


@contextmanager
def one_behind() -> Iterator[Callable[..., None]]:
    """``run(fn, *args)``: ``fn(*args)`` on a thread of its own, after the call before it has ended, while the
    caller goes on (reads the next batch while this one is written). Leaving waits for the last call and raises its
    error. When the caller raises, the call under way ends first (the pool's shutdown waits for it), so whatever it
    used (a session) is idle again before the caller's error handling (a rollback) uses it."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="vlbatch-behind") as pool:
        pending: Future[None] | None = None

        def run(fn: Callable[..., None], *args: Any) -> None:
            nonlocal pending
            if pending is not None:
                pending.result()
            pending = pool.submit(fn, *args)

        yield run
        if pending is not None:
            pending.result()


ID_BATCH = 10_000  # ids per IN list: under SQLite's and PostgreSQL's bound-parameter limits (32,766 / 65,535)


def upsert(session: Session, table: type[Base], values: dict[str, Any], *, keys: list[str]) -> Any:
    """INSERT ... ON CONFLICT (keys) DO UPDATE of one row, for the two dialects we run on."""
    return upsert_many(session, table, [values], keys=keys)


def upsert_many(session: Session, table: type[Base], rows: list[dict[str, Any]], *, keys: list[str]) -> Any:
    """One multi-row INSERT ... ON CONFLICT (keys) DO UPDATE with the new row's values."""
    from sqlalchemy.dialects import postgresql, sqlite

    dialect = session.get_bind().dialect.name
    module: Any = postgresql if dialect == "postgresql" else sqlite
    stmt = module.insert(table).values(rows)
    cols = [k for k in rows[0] if k not in keys]
    return stmt.on_conflict_do_update(index_elements=keys, set_={k: stmt.excluded[k] for k in cols})

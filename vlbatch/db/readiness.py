"""The readiness probe's write: a row really rewritten and committed, within a short deadline.

Why a real write: a statement that changes no row (``UPDATE ... WHERE 1 = 0``) takes the write lock and touches
no page, so it succeeds on a full disk, an unwritable WAL or a SQLite file replaced under the process, while every
real write fails. Rewriting one row and committing goes through the same path as a job's insert: the WAL append
(SQLite) or WAL flush (PostgreSQL), and the commit guard that refuses a replaced SQLite file
(``vlbatch.db.session``). Why a deadline: a write waits for the write lock up to the busy timeout (30 s on
SQLite), and a probe that hangs that long is a probe that times out; held past ``timeout_s`` the lock counts as
not ready. Keyword-only; no HTTP errors.
"""

from __future__ import annotations

from sqlalchemy import Engine, insert, update
from sqlalchemy.exc import DBAPIError

from vlbatch.db.models import ReadinessProbe, utcnow

__all__ = ["probe_write"]

PROBE_ROW = 1


def probe_write(engine: Engine, *, timeout_s: float) -> None:
    """Rewrite the probe row and commit, waiting at most about ``timeout_s`` for locks; raises the driver's error
    (``DBAPIError``) or ``DatabaseUnavailable`` when the write does not land."""
    millis = max(1, int(timeout_s * 1000))
    with engine.connect() as conn:
        sqlite = conn.dialect.name == "sqlite"
        if sqlite:  # per connection: set for this probe, given back as it was to the pool
            previous = int(conn.exec_driver_sql("PRAGMA busy_timeout").scalar() or 0)
            conn.exec_driver_sql(f"PRAGMA busy_timeout = {millis}")
        else:  # PostgreSQL: both end with the transaction
            conn.exec_driver_sql(f"SET LOCAL lock_timeout = {millis}")
            conn.exec_driver_sql(f"SET LOCAL statement_timeout = {millis}")
        try:
            stmt = update(ReadinessProbe).where(ReadinessProbe.id == PROBE_ROW)
            done = conn.execute(stmt.values(probes=ReadinessProbe.probes + 1, probed_at=utcnow()))
            if done.rowcount == 0:  # the row was deleted by hand: made again, which is a write as well
                conn.execute(insert(ReadinessProbe).values(id=PROBE_ROW, probes=1, probed_at=utcnow()))
            conn.commit()
        except BaseException:
            conn.rollback()
            raise
        finally:
            if sqlite and not conn.invalidated:
                try:
                    conn.exec_driver_sql(f"PRAGMA busy_timeout = {previous}")
                    conn.commit()
                except DBAPIError:
                    conn.invalidate()  # never back to the pool with the probe's short timeout

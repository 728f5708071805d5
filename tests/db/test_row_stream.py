"""``vlbatch.db.row_stream.row_pages`` on PostgreSQL: a query's rows in pages, read ahead by a thread, through the
streamed query (libpq's chunked rows) or, with an older libpq, a named cursor. A read left early is cancelled on the
server and leaves the session's transaction as it was: its own settings undone, the session still usable."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import psycopg
import pytest
from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from vlbatch.db import row_stream
from vlbatch.db.session import make_engine, make_sessionmaker

ROWS = 2_000_000  # far more than the socket's buffers hold: a read left after a page leaves the server mid-query


@pytest.fixture(params=["streamed", "named cursor"])
def session(request: pytest.FixtureRequest, pg_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Session]:
    if request.param == "named cursor":  # as with a libpq without chunked rows
        monkeypatch.setattr(row_stream, "_CHUNKED_ROWS_LIBPQ", 10**9)
    engine = make_engine(pg_url)
    with make_sessionmaker(engine)() as s:
        yield s
    engine.dispose()


def test_pages_come_in_order_and_whole(session: Session) -> None:
    pages = list(row_stream.row_pages(session, select(func.generate_series(1, 1000).label("k")), page_size=64))
    assert [len(p) for p in pages] == [64] * 15 + [40]
    assert [row[0] for page in pages for row in page] == list(range(1, 1001))
    assert all(type(row) is tuple for row in pages[0])


def test_a_read_left_early_ends_on_the_server_and_leaves_the_session_as_it_was(session: Session) -> None:
    session.execute(text("CREATE TEMP TABLE mine (x int)"))
    session.execute(text("INSERT INTO mine VALUES (7)"))  # the session's own work, before the read
    pages = row_stream.row_pages(session, select(func.generate_series(1, ROWS).label("k")), page_size=500)
    assert [row[0] for row in next(pages)] == list(range(1, 501))
    pages.close()  # type: ignore[attr-defined]  # a client that hung up

    assert not [t for t in threading.enumerate() if t.name == "row-stream"]
    conn = session.connection()
    assert conn.exec_driver_sql("SELECT count(*) FROM pg_cursors").scalar() == 0
    assert conn.exec_driver_sql("SHOW enable_sort").scalar() == "on"  # the read's settings ended with it
    assert conn.exec_driver_sql("SELECT x FROM mine").scalar() == 7  # same transaction, still usable


def test_an_error_in_the_query_reaches_the_reader_and_the_session_goes_on(session: Session) -> None:
    session.execute(text("CREATE TEMP TABLE mine (x int)"))
    bad = select((func.generate_series(-3, 3).label("k") + 10) / func.generate_series(-3, 3))  # 10 / 0 on row 4
    with pytest.raises(psycopg.errors.DivisionByZero):
        for _ in row_stream.row_pages(session, bad, page_size=2):
            pass
    assert not [t for t in threading.enumerate() if t.name == "row-stream"]
    assert session.connection().exec_driver_sql("SELECT count(*) FROM mine").scalar() == 0

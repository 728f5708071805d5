"""Item rows written straight through the driver: COPY on PostgreSQL, one executemany per batch on SQLite.

The ORM's bulk insert spent most of a 100k-item job on per-row parameter processing; these rows need none:
``inputs`` are JSON-encoded here (as the JSON type would), the timestamp is rendered once per batch. Every job's
items are written here, a batch at a time (``job_store.create_job``'s list, ``job_store.add_item_stream``'s stream).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import insert
from sqlalchemy.orm import Session

from vlbatch.db.models import Base, Item, ItemStatus, utcnow

__all__ = ["ItemEntry", "write_item_rows"]

_ITEM_COLUMNS = ("job_id", "chunk_id", "seq", "ref", "inputs", "status", "attempts", "crash_count", "updated_at")

# (chunk id, seq, ref, inputs) of one queued item
ItemEntry = tuple[int, int, str | None, dict[str, Any]]


def write_item_rows(session: Session, *, job_id: str, entries: Sequence[ItemEntry]) -> None:
    """Insert ``entries`` as queued items of ``job_id`` in this session's transaction (one COPY, or one
    executemany): one batch, which its caller bounds."""
    if not entries:
        return
    conn = session.connection()
    dialect = conn.dialect
    table = Base.metadata.tables[Item.__tablename__]
    now = utcnow()
    status = ItemStatus.QUEUED.value
    cols = ", ".join(_ITEM_COLUMNS)
    serialize = getattr(dialect, "_json_serializer", None) or json.dumps
    if dialect.name == "postgresql" and dialect.driver == "psycopg":
        # COPY's text format; PostgreSQL parses the ISO timestamp as timestamptz and the text as json.
        stamp = now.isoformat()
        driver: Any = conn.connection.driver_connection  # the psycopg connection, in this transaction
        with driver.cursor() as cur, cur.copy(f"COPY {table.name} ({cols}) FROM STDIN") as copy:
            for chunk_id, seq, ref, inputs in entries:
                copy.write_row((job_id, chunk_id, seq, ref, serialize(inputs), status, 0, 0, stamp))
    elif dialect.paramstyle == "qmark":  # SQLite
        to_db = table.c.updated_at.type.dialect_impl(dialect).bind_processor(dialect)
        stamp_db = to_db(now) if to_db else now
        sql = f"INSERT INTO {table.name} ({cols}) VALUES ({', '.join('?' * len(_ITEM_COLUMNS))})"
        rows = [(job_id, c, q, r, serialize(i), status, 0, 0, stamp_db) for c, q, r, i in entries]
        conn.exec_driver_sql(sql, rows)
    else:  # any other driver: the Core insert, which encodes the values itself
        values = [(job_id, c, q, r, i, status, 0, 0, now) for c, q, r, i in entries]
        conn.execute(insert(table), [dict(zip(_ITEM_COLUMNS, v, strict=True)) for v in values])

"""PostgreSQL timestamps that Python cannot hold are read as the nearest ones it can.

PostgreSQL stores 4713 BC to 294276 AD; Python's datetime holds years 1 to 9999. A value outside (a deadline of
year 1 at +14:00 is 1 BC in UTC, written before the API bounded deadlines, or by hand) would make psycopg raise on
every read of its row: the job's page, the job lists, /metrics and each worker's claim on the queue would fail
for as long as the row exists. Read clamped, the row stays readable and can be cancelled or fixed through the API.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

EARLIEST = datetime.min.replace(tzinfo=UTC)
LATEST = datetime.max.replace(tzinfo=UTC)


def register_clamped_loaders(dbapi_conn: Any) -> None:
    """Replace the connection's ``timestamptz`` loaders (text and binary) by ones that clamp to Python's range."""
    from psycopg import DataError
    from psycopg.types.datetime import TimestamptzBinaryLoader, TimestamptzLoader

    class _Text(TimestamptzLoader):
        def load(self, data: Any) -> datetime:
            try:
                return super().load(data)
            except DataError:
                return EARLIEST if b"BC" in bytes(data) else LATEST

    class _Binary(TimestamptzBinaryLoader):
        def load(self, data: Any) -> datetime:
            try:
                return super().load(data)
            except DataError:  # microseconds since 2000-01-01: negative is before year 1
                return EARLIEST if int.from_bytes(bytes(data), "big", signed=True) < 0 else LATEST

    dbapi_conn.adapters.register_loader("timestamptz", _Text)
    dbapi_conn.adapters.register_loader("timestamptz", _Binary)

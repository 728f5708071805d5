"""Database engine and sessions: built once per process, disposed at shutdown."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from vlbatch.db.pg_timestamps import register_clamped_loaders
from vlbatch.errors import DATABASE_UNAVAILABLE, VlbatchError

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"


def make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        # hide_parameters: a database error's text (logged by the API and workers) never carries the bound values,
        # which hold item inputs (inline images, prompts) and key hashes.
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30}, hide_parameters=True)

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
            # WAL lets the API read while a worker writes; foreign keys are off by default in SQLite.
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

        _guard_sqlite_file(engine, url)
        return engine
    engine = create_engine(url, pool_pre_ping=True, hide_parameters=True)
    if make_url(url).get_driver_name() == "psycopg":

        @event.listens_for(engine, "connect")
        def _readable_timestamps(dbapi_conn: Any, _record: Any) -> None:
            register_clamped_loaders(dbapi_conn)

    return engine


class DatabaseUnavailable(VlbatchError):
    code = DATABASE_UNAVAILABLE


def sqlite_file(url: str) -> Path | None:
    """The file a SQLite URL names; None for other databases and in-memory ones."""
    parsed = make_url(url)
    if not parsed.drivername.startswith("sqlite") or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database)


def _guard_sqlite_file(engine: Engine, url: str) -> None:
    """Refuse to commit into a SQLite file that was removed or replaced since the connection opened it.

    An open connection keeps writing to the unlinked inode and every commit succeeds, so an API would answer
    201 for jobs that are gone at the next start. The file's identity is taken at connect and checked before
    each commit (one ``stat``)."""
    path = sqlite_file(url)
    if path is None:
        return

    @event.listens_for(engine, "connect")
    def _remember(_dbapi_conn: Any, record: Any) -> None:
        record.info["sqlite_file_id"] = _file_id(path)

    @event.listens_for(engine, "commit")
    def _check(conn: Any) -> None:
        opened = conn.connection.info.get("sqlite_file_id")
        if _file_id(path) != opened:
            conn.invalidate()  # this connection writes to a file nobody will read again
            raise DatabaseUnavailable(f"the SQLite file {path} was removed or replaced; nothing was stored")


def _file_id(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_dev, st.st_ino


def make_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


def migrate(url: str) -> None:
    """Bring the schema to the newest Alembic revision."""
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    command.upgrade(cfg, "heads")  # feature branches may add parallel heads until merged

"""Shared fixtures: real SQLite files, a real PostgreSQL database, a real HTTP server.

PostgreSQL and Redis fixtures skip when the service is absent locally, but fail under CI=true so a
suite can never pass silently without its services.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.rig import rig, service_rig  # noqa: F401  (the run's real worker rig: tests/support/rig.py)
from tests.support.services import free_port, worker_redis_url
from tests.support.shared_engine import shared_engine, shared_engines  # noqa: F401  (fixtures)

# The lanes: engine tests after the engine-free ones, grouped by engine, on one xdist worker (tests/support/lanes.py).
pytest_plugins = ["tests.support.lanes"]

PG_ADMIN_URL = os.environ.get("VLBATCH_TEST_PG_URL", "postgresql://127.0.0.1:5432/test")
# Each xdist worker its own database index, counting down from this one (15, 14, ...): tests flush and read queues.
REDIS_URL = worker_redis_url(os.environ.get("VLBATCH_TEST_REDIS_URL", "redis://127.0.0.1:6379/15"))

log = logging.getLogger(__name__)


def pytest_configure(config: pytest.Config) -> None:
    """One engine-load ledger for the whole run (tests/support/engine.py): set before any test or command starts,
    so every engine load of the run, in this process or a child, is counted in it."""
    from tests.support.engine import LEDGER_ENV

    if LEDGER_ENV not in os.environ:
        folder = Path(tempfile.mkdtemp(prefix="vlbatch-engine-loads-"))
        os.environ[LEDGER_ENV] = str(folder / "loads.tsv")
        config.stash[_OWN_LEDGER] = folder  # this process made it: it removes it when the run ends


_OWN_LEDGER = pytest.StashKey[Path]()


def pytest_unconfigure(config: pytest.Config) -> None:
    import shutil

    if (folder := config.stash.get(_OWN_LEDGER, None)) is not None:
        shutil.rmtree(folder, ignore_errors=True)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    """The run's engine loads, counted in the ledger every process shares: printed once, by the controller under
    xdist (its summary comes after every worker ended), by the one process otherwise."""
    from engine.runtime.load_ledger import loads
    from tests.support.engine import ledger

    if hasattr(config, "workerinput"):
        return
    path = ledger()
    counted = loads(path) if path is not None else []
    terminalreporter.write_line(f"engine loads: {len(counted)}")


def _service_missing(what: str, exc: Exception) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{what} is required in CI but unreachable: {exc}")
    pytest.skip(f"{what} not reachable: {exc}")


@contextmanager
def _pg_database(prefix: str) -> Iterator[str]:
    """A PostgreSQL database of its own on the suite's server, dropped after."""
    psycopg = pytest.importorskip("psycopg")
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    try:
        admin = psycopg.connect(PG_ADMIN_URL, autocommit=True, connect_timeout=3)
    except Exception as exc:
        _service_missing("PostgreSQL", exc)
    admin.execute(f'CREATE DATABASE "{name}"')
    base = PG_ADMIN_URL.rsplit("/", 1)[0]
    try:
        yield f"{base.replace('postgresql://', 'postgresql+psycopg://')}/{name}"
    finally:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    with _pg_database("vlbatch_t") as url:
        yield url


@pytest.fixture(scope="session")
def redis_url() -> str:
    redis = pytest.importorskip("redis")
    try:
        redis.Redis.from_url(REDIS_URL, socket_timeout=3).ping()
    except Exception as exc:
        _service_missing("Redis", exc)
    return REDIS_URL


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'vlbatch.db'}"
    url: str = request.getfixturevalue("pg_url")
    reset_schema(url)
    return url


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def module_db_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A database of the test module's own, on SQLite and on PostgreSQL, empty when it starts: for tests that only
    read, or are refused before anything is written, so that they share one migrated database and one server
    rather than each making its own (the PostgreSQL one is not the session's, which ``db_url`` empties per test)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path_factory.mktemp('module-db') / 'vlbatch.db'}"
        return
    with _pg_database("vlbatch_m") as url:
        yield url


def reset_schema(url: str) -> None:
    """Drop every table of ours (and Alembic's mark) so a test starts on an empty schema.

    An earlier test's server or thread can outlive it with a connection still open in a transaction (a request
    handler or a reconciler pass that had not ended when its server was told to stop); DROP TABLE would wait on
    its locks for ever. Such connections are named in the log and ended first, and the drop waits on a lock for
    at most a bounded time, so a leak shows up as an error here rather than as a suite-wide timeout.
    """
    from sqlalchemy import create_engine

    from vlbatch.db.claim_tables import JobClaim
    from vlbatch.db.models import Base
    from vlbatch.db.retention_tables import TenantRetention
    from vlbatch.db.webhook_tables import WebhookEndpoint

    # The tables of their own modules are dropped too.
    for table in (JobClaim, TenantRetention, WebhookEndpoint):
        assert table.__tablename__ in Base.metadata.tables
    eng = create_engine(url)
    with eng.begin() as conn:
        # Idle connections hold no lock (pools keep them between tests); only one inside a transaction blocks.
        busy = conn.exec_driver_sql(
            "SELECT pid, state, left(query, 120) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid() AND state <> 'idle'"
        ).all()
        for pid, state, query in busy:
            log.warning("ending a connection left by an earlier test (pid %s, %s): %s", pid, state, query)
            conn.exec_driver_sql(f"SELECT pg_terminate_backend({int(pid)})")
        conn.exec_driver_sql("SET LOCAL lock_timeout = '30s'")
        Base.metadata.drop_all(conn)
        conn.exec_driver_sql("DROP TABLE IF EXISTS alembic_version")
    eng.dispose()


@pytest.fixture
def empty_pg_url(pg_url: str) -> str:
    """The session's PostgreSQL database with an empty schema."""
    reset_schema(pg_url)
    return pg_url


class LiveServer:
    def __init__(self, app: object) -> None:
        import uvicorn

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> LiveServer:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("API server did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)


def make_key(database_url: str, *, tenant: str = "default", admin: bool = False, name: str | None = None) -> str:
    """A new API key in this database (migrated first, as the API would): its secret, for ``bearer``."""
    from vlbatch.db.keys import create_key
    from vlbatch.db.session import make_engine, make_sessionmaker, migrate

    migrate(database_url)
    engine = make_engine(database_url)
    with make_sessionmaker(engine)() as session:
        secret = create_key(session, tenant=tenant, is_admin=admin, name=name).secret
        session.commit()
    engine.dispose()
    return secret


def bearer(key: str) -> dict[str, str]:
    """The header an API client sends its key in (the OpenAI client's form)."""
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
def api_key() -> type[KeyMaker]:
    """Keys for a test API (auth is on by default): ``key = api_key.make(settings.database_url, tenant="acme",
    admin=False)``, then ``httpx.Client(..., headers=api_key.header(key))``; the functions ``make_key`` and
    ``bearer`` of this module do the same without the fixture."""
    return KeyMaker


class KeyMaker:
    make = staticmethod(make_key)
    header = staticmethod(bearer)


@pytest.fixture
def serve() -> type[LiveServer]:
    """Run an ASGI app on a real loopback port: ``with serve(app) as srv: srv.url``."""
    return LiveServer


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random-weight Qwen2-VL written by the product's own generator; nothing is downloaded."""
    from engine.tiny_model import write_tiny_qwen2_vl

    return write_tiny_qwen2_vl(tmp_path_factory.mktemp("tiny-qwen2-vl"))

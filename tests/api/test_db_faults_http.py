"""A database that stops taking writes is reported, not hidden: ``/readyz`` says so and writes answer 503
``database_unavailable`` (never a 500, never a 201 for a job that is not stored). Real SQLite files and a real
PostgreSQL database put in read-only mode."""

from __future__ import annotations

import os
import resource
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest
from sqlalchemy.engine import make_url

from api.main import create_app
from vlbatch.settings import Settings

pytestmark = pytest.mark.timeout(120)

ONE_ITEM = {"items": [{"images": ["/a.jpg"]}]}


def _serve(db_url: str, redis_url: str, serve: type, api_key: type) -> Iterator[httpx.Client]:
    settings = Settings(database_url=db_url, broker_url=redis_url, model_name="tiny", api_reconcile=False)
    headers = api_key.header(api_key.make(db_url))
    with serve(create_app(settings)) as srv, httpx.Client(base_url=srv.url, timeout=30, headers=headers) as client:
        yield client


def test_a_removed_sqlite_file_is_not_ready_and_takes_no_job(
    tmp_path: Path, redis_url: str, serve: type, api_key: type
) -> None:
    db = tmp_path / "api.db"
    for client in _serve(f"sqlite:///{db}", redis_url, serve, api_key):
        assert client.get("/readyz").json() == {"status": "ready"}
        assert client.post("/v1/jobs/tagging", json=ONE_ITEM).status_code == 201
        db.unlink()
        r = client.get("/readyz")
        assert r.status_code == 503 and r.json()["code"] == "database_unavailable", r.text
        r = client.post("/v1/jobs/tagging", json=ONE_ITEM)
        assert r.status_code == 503 and r.json()["code"] == "database_unavailable", r.text
        assert client.get("/healthz").status_code == 200


@pytest.fixture
def read_only_pg(pg_url: str) -> Iterator[str]:
    """The session's PostgreSQL database, with the schema in place, switched to read-only for new sessions."""
    from tests.conftest import reset_schema
    from vlbatch.db.session import migrate

    reset_schema(pg_url)
    migrate(pg_url)
    name = make_url(pg_url).database
    admin_url = make_url(pg_url).set(drivername="postgresql", database="test").render_as_string(hide_password=False)
    with psycopg.connect(admin_url, autocommit=True) as admin:
        yield name or ""
        admin.execute(f'ALTER DATABASE "{name}" RESET default_transaction_read_only')


def test_a_read_only_postgresql_is_not_ready_and_writes_are_503(
    pg_url: str, read_only_pg: str, redis_url: str, serve: type, api_key: type
) -> None:
    for client in _serve(pg_url, redis_url, serve, api_key):
        assert client.get("/readyz").json() == {"status": "ready"}
        admin_url = make_url(pg_url).set(drivername="postgresql", database="test")
        with psycopg.connect(admin_url.render_as_string(hide_password=False), autocommit=True) as admin:
            admin.execute(f'ALTER DATABASE "{read_only_pg}" SET default_transaction_read_only = on')
            # Sessions already open keep their setting: end them, as a failover to a read-only replica would.
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                (read_only_pg,),
            )
        r = client.get("/readyz")
        assert r.status_code == 503 and r.json()["code"] == "database_unavailable", r.text
        r = client.post("/v1/jobs/tagging", json=ONE_ITEM)
        assert r.status_code == 503 and r.json()["code"] == "database_unavailable", r.text


def test_a_replaced_sqlite_file_is_not_ready(tmp_path: Path, redis_url: str, serve: type, api_key: type) -> None:
    db = tmp_path / "api.db"
    for client in _serve(f"sqlite:///{db}", redis_url, serve, api_key):
        assert client.get("/readyz").json() == {"status": "ready"}
        copy = tmp_path / "copy.db"
        shutil.copyfile(db, copy)
        os.replace(copy, db)  # a restore over the live file: the API's connections still write to the old one
        r = client.get("/readyz")
        assert r.status_code == 503 and r.json()["code"] == "database_unavailable", r.text


def test_a_full_disk_is_not_ready(tmp_path: Path, redis_url: str, serve: type, api_key: type) -> None:
    """No file may grow (RLIMIT_FSIZE at 0 fails every write past offset 0 with EFBIG, as a full disk fails them
    with ENOSPC): a probe that writes no page still passed."""
    db = tmp_path / "api.db"
    for client in _serve(f"sqlite:///{db}", redis_url, serve, api_key):
        assert client.get("/readyz").json() == {"status": "ready"}
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (0, hard))
        try:
            r = client.get("/readyz")
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        assert r.status_code == 503 and r.json()["code"] == "database_unavailable", r.text
        assert client.get("/readyz").json() == {"status": "ready"}  # space again: ready again


def test_a_held_write_lock_is_not_ready_within_the_probe_timeout(
    tmp_path: Path, redis_url: str, serve: type, api_key: type
) -> None:
    """The busy timeout is 30 s: a probe waiting it out would outlast this client's 10 s."""
    db = tmp_path / "api.db"
    for client in _serve(f"sqlite:///{db}", redis_url, serve, api_key):
        assert client.get("/readyz").json() == {"status": "ready"}
        holder = sqlite3.connect(db, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        try:
            r = client.get("/readyz", timeout=10)
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        assert r.status_code == 503 and "locked" in r.json()["detail"], r.text
        assert client.get("/readyz").json() == {"status": "ready"}

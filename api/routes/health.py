"""Liveness and readiness. Neither touches the broker: a hung Redis must not make the API look dead."""

from __future__ import annotations

from fastapi import APIRouter
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from api.deps import SessionClosingRoute, SessionDep, SettingsDep
from api.errors import RequestRefused, errors
from vlbatch.db import engine_states
from vlbatch.db.session import sqlite_file
from vlbatch.errors import DATABASE_UNAVAILABLE, ENGINE_CANARY_FAILED

router = APIRouter(route_class=SessionClosingRoute, tags=["health"])


@router.get("/healthz")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", responses=errors(DATABASE_UNAVAILABLE, ENGINE_CANARY_FAILED))
def readyz(session: SessionDep, settings: SettingsDep) -> dict[str, str]:
    """Ready when the database takes a write: a SQLite file that is gone counts as down, and a write that
    touches no row (rolled back) must succeed, so a read-only file or a read-only replica is not ready either.
    Not ready is 503 ``database_unavailable``. Nor is a deployment whose every engine of a model is broken (the
    workers' canaries fail, their breakers are open): 503 ``engine_canary_failed`` with the reason."""
    path = sqlite_file(settings.database_url)
    if path is not None and not path.is_file():
        raise RequestRefused(DATABASE_UNAVAILABLE, f"the SQLite file {path} does not exist")
    try:
        # Starts a write transaction (SQLite takes its write lock, PostgreSQL refuses it on a read-only server)
        # without changing a row.
        session.execute(text("UPDATE jobs SET status = status WHERE 1 = 0"))
        session.rollback()
    except DBAPIError as exc:
        session.rollback()
        raise RequestRefused(DATABASE_UNAVAILABLE, f"the database does not take writes: {exc.orig}") from exc
    broken = engine_states.broken_engines(session)
    if broken:
        raise RequestRefused(ENGINE_CANARY_FAILED, "; ".join(b.message() for b in broken))
    return {"status": "ready"}

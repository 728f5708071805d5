"""Liveness and readiness. Neither touches the broker: a hung Redis must not make the API look dead."""

from __future__ import annotations

from fastapi import APIRouter
from sqlalchemy.exc import DBAPIError

from api.deps import SessionClosingRoute, SessionDep, SettingsDep
from api.http_errors import RequestRefused, errors
from vlbatch.db import engine_states
from vlbatch.db.readiness import probe_write
from vlbatch.db.session import DatabaseUnavailable, sqlite_file
from vlbatch.errors import DATABASE_UNAVAILABLE, ENGINE_CANARY_FAILED

router = APIRouter(route_class=SessionClosingRoute, tags=["health"])


@router.get("/healthz")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", responses=errors(DATABASE_UNAVAILABLE, ENGINE_CANARY_FAILED))
def readyz(session: SessionDep, settings: SettingsDep) -> dict[str, str]:
    """Ready when the database takes a write: one row is rewritten and committed (``vlbatch.db.readiness``), so a
    full disk, an unwritable WAL, a SQLite file removed or replaced, a read-only file or server, or a write lock
    held past ``VLBATCH_READYZ_TIMEOUT_S`` are all not ready: 503 ``database_unavailable``. Nor is a deployment
    whose every engine of a model is broken (the workers' canaries fail, their breakers are open): 503
    ``engine_canary_failed`` with the reason."""
    path = sqlite_file(settings.database.database_url)
    if path is not None and not path.is_file():
        raise RequestRefused(DATABASE_UNAVAILABLE, f"the SQLite file {path} does not exist")
    try:
        probe_write(session.get_bind().engine, timeout_s=settings.http.readyz_timeout_s)
    except DBAPIError as exc:
        raise RequestRefused(DATABASE_UNAVAILABLE, f"the database does not take writes: {exc.orig}") from exc
    except DatabaseUnavailable as exc:
        raise RequestRefused(DATABASE_UNAVAILABLE, str(exc)) from exc
    broken = engine_states.broken_engines(session)
    if broken:
        raise RequestRefused(ENGINE_CANARY_FAILED, "; ".join(b.message() for b in broken))
    return {"status": "ready"}

"""Liveness and readiness."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException
from sqlalchemy import text

from api.deps import SessionDep

router = APIRouter(tags=["health"])


@router.get("/healthz")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz")
def readyz(session: SessionDep) -> dict[str, str]:
    try:
        session.execute(text("SELECT 1"))
    except Exception as exc:
        raise HTTPException(503, f"database not reachable: {exc}") from exc
    return {"status": "ready"}

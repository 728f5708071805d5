"""``GET /v1/errors``: every error code with its meaning, whether a retry can help, and its HTTP status."""

from __future__ import annotations

from fastapi import APIRouter

from api.schemas import ErrorCodeOut
from vlbatch.errors import CODES, USES

router = APIRouter(prefix="/v1/errors", tags=["errors"])


@router.get("")
def list_error_codes() -> list[ErrorCodeOut]:
    return [
        ErrorCodeOut(
            code=e.code,
            meaning=e.meaning,
            retryable=e.retryable,
            http_status=e.http_status,
            used_in=[u for u in USES if u in e.used_in],
        )
        for e in CODES.values()
    ]

"""How a ``VlbatchError`` becomes an HTTP answer, in one place, and the errors only the API raises.

Routes and the code under them raise ``VlbatchError`` subclasses, never ``HTTPException``; the handler
answers with the status the registry (``vlbatch.errors``) gives the code and the body
``{"detail": message, "code": code}``. ``detail`` is FastAPI's own key, so clients that read it keep working.
Anything else that escapes a route answers 500 with the same shape and ``internal_error``; Starlette raises
it on to the server, which logs the traceback.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DBAPIError, OperationalError

from vlbatch.errors import DATABASE_UNAVAILABLE, INTERNAL_ERROR, JOB_NOT_FOUND, UNAUTHORIZED, VlbatchError, lookup

log = logging.getLogger(__name__)


class JobNotFound(VlbatchError):
    code = JOB_NOT_FOUND

    def __init__(self, job_id: str) -> None:
        super().__init__(f"job '{job_id}' not found")


class RequestRefused(VlbatchError):
    """A request the API cannot take as given; ``code`` names the rule it breaks."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message, code=code)


def error_body(code: str, message: str) -> JSONResponse:
    # A 401 names the scheme to answer with (RFC 9110); the API key goes in as a bearer token.
    headers = {"WWW-Authenticate": "Bearer"} if code == UNAUTHORIZED else None
    return JSONResponse({"detail": message, "code": code}, status_code=lookup(code).http_status, headers=headers)


async def _vlbatch_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, VlbatchError)
    return error_body(exc.code, exc.message)


# PostgreSQL states that mean "cannot write now", not "bad statement": read-only transaction, admin shutdown,
# crash shutdown, cannot connect now, disk full.
_UNAVAILABLE_SQLSTATES = frozenset({"25006", "57P01", "57P02", "57P03", "53100"})


def _unavailable(exc: Exception) -> bool:
    if isinstance(exc, OperationalError):
        return True
    return getattr(getattr(exc, "orig", None), "sqlstate", None) in _UNAVAILABLE_SQLSTATES


async def _database_error(request: Request, exc: Exception) -> JSONResponse:
    if not _unavailable(exc):
        log.error("internal error on %s %s", request.method, request.url.path, exc_info=exc)
        return await _unexpected(request, exc)
    # The driver's own words name the fault (read-only file, refused connection, disk full); they go to the log,
    # the client gets a retryable 503 rather than a 500 that reads as a bug in its request.
    log.warning("database unavailable on %s %s: %s", request.method, request.url.path, exc)
    return error_body(DATABASE_UNAVAILABLE, f"the database cannot be reached or written ({type(exc).__name__})")


async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
    return error_body(INTERNAL_ERROR, f"internal error ({type(exc).__name__}); the API log has the traceback")


def install(app: FastAPI) -> None:
    app.add_exception_handler(VlbatchError, _vlbatch_error)
    app.add_exception_handler(DBAPIError, _database_error)
    app.add_exception_handler(Exception, _unexpected)

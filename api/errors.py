"""How a ``VlbatchError`` becomes an HTTP answer, in one place, and the errors only the API raises.

Routes and the code under them raise ``VlbatchError`` subclasses, never ``HTTPException``; the handler
answers with the status the registry (``vlbatch.errors``) gives the code and the body
``{"detail": message, "code": code}``. ``detail`` is FastAPI's own key, so clients that read it keep working.
Anything else that escapes a route answers 500 with the same shape and ``internal_error``; Starlette raises
it on to the server, which logs the traceback.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from vlbatch.errors import INTERNAL_ERROR, JOB_NOT_FOUND, UNAUTHORIZED, VlbatchError, lookup


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


async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
    return error_body(INTERNAL_ERROR, f"internal error ({type(exc).__name__}); the API log has the traceback")


def install(app: FastAPI) -> None:
    app.add_exception_handler(VlbatchError, _vlbatch_error)
    app.add_exception_handler(Exception, _unexpected)

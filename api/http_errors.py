"""How a ``VlbatchError`` becomes an HTTP answer, in one place, and the errors only the API raises.

Routes and the code under them raise ``VlbatchError`` subclasses, never ``HTTPException``; the handler
answers with the status the registry (``vlbatch.errors``) gives the code and the body
``{"detail": message, "code": code}``. ``detail`` is FastAPI's own key, so clients that read it keep working.
Anything else that escapes a route answers 500 with the same shape and ``internal_error``; Starlette raises
it on to the server, which logs the traceback.

The OpenAPI spec lists each route's error answers by status: the codes the route declares (``errors``) and
those every route can give, each answer naming its codes (``x-error-codes`` and the enum of ``code``).
"""

from __future__ import annotations

import logging
import math
import reprlib
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from sqlalchemy.exc import DBAPIError, OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException

from api.body_limit import UPLOAD_PREFIXES
from api.text_check import printable
from vlbatch.errors import (
    CROSS_SITE_REFUSED,
    DATABASE_UNAVAILABLE,
    INTERNAL_ERROR,
    INVALID_REQUEST,
    JOB_NOT_FOUND,
    REQUEST_TOO_LARGE,
    UNAUTHORIZED,
    UNPARSABLE_BODY,
    UPLOAD_TOO_LARGE,
    VlbatchError,
    lookup,
)

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


def unavailable(exc: Exception) -> bool:
    if isinstance(exc, OperationalError):
        return True
    return getattr(getattr(exc, "orig", None), "sqlstate", None) in _UNAVAILABLE_SQLSTATES


async def _database_error(request: Request, exc: Exception) -> JSONResponse:
    if not unavailable(exc):
        log.error("internal error on %s %s", request.method, request.url.path, exc_info=exc)
        return await _unexpected(request, exc)
    # The driver's own words name the fault (read-only file, refused connection, disk full); they go to the log,
    # the client gets a retryable 503 rather than a 500 that reads as a bug in its request.
    log.warning("database unavailable on %s %s: %s", request.method, request.url.path, exc)
    return error_body(DATABASE_UNAVAILABLE, f"the database cannot be reached or written ({type(exc).__name__})")


ECHO_CHARS = 200  # of a refused input a 422 shows back; a huge body is not sent back whole
MAX_ECHOED_ERRORS = 20  # faults a 422 lists; a count stands for the others
_SHORT = reprlib.Repr()
_SHORT.maxstring = _SHORT.maxother = ECHO_CHARS


def _echo(value: Any) -> Any:
    """``value`` as a validation error shows it: strings cut to ``ECHO_CHARS`` with surrogates escaped, a list
    or object whose JSON is longer than that replaced by the start of its text."""
    if isinstance(value, str):
        return printable(value, ECHO_CHARS)
    if isinstance(value, dict | list):
        # reprlib's text stops after a few entries a level: a body of a million keys costs no more than a small one
        text = _SHORT.repr(value)
        return printable(text, ECHO_CHARS) if len(text) > ECHO_CHARS or "..." in text else _echo_each(value)
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)  # NaN, Infinity (and 1e400, which parses to it) have no JSON form: shown as text
    return value


def _echo_each(value: dict[str, Any] | list[Any]) -> Any:
    if isinstance(value, dict):
        return {printable(str(k), ECHO_CHARS): _echo(v) for k, v in value.items()}
    return [_echo(v) for v in value]


async def _invalid_request(_: Request, exc: Exception) -> JSONResponse:
    # FastAPI's shape (detail: a list of errors) with the code every other refusal carries; inputs cut short and
    # made encodable, so neither a 300 MB body nor a lone surrogate comes back.
    assert isinstance(exc, RequestValidationError)
    faults = exc.errors()
    errors = []
    for err in faults[:MAX_ECHOED_ERRORS]:  # cut short before encoding: ``input`` may be the whole body
        err = jsonable_encoder({k: (_echo(v) if k in ("input", "ctx") else v) for k, v in err.items()})
        err["msg"] = printable(str(err.get("msg", "")), 4 * ECHO_CHARS)
        errors.append(err)
    if len(faults) > MAX_ECHOED_ERRORS:  # the rest named by their count: the answer stays small whatever came in
        more = len(faults) - MAX_ECHOED_ERRORS
        errors.append({"type": "more_errors", "loc": [], "msg": f"and {more} more faults, not listed", "input": None})
    return JSONResponse({"detail": errors, "code": INVALID_REQUEST}, status_code=lookup(INVALID_REQUEST).http_status)


async def _http_error(request: Request, exc: Exception) -> Response:
    # FastAPI answers a body it cannot parse (JSON nested past the parser's depth, say) with a bare 400; it gets
    # its code like every other refusal. Other statuses (404 of an unknown path, 405) keep FastAPI's answer.
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 400:
        return error_body(UNPARSABLE_BODY, f"the request body cannot be parsed ({exc.detail})")
    return await http_exception_handler(request, exc)


async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
    return error_body(INTERNAL_ERROR, f"internal error ({type(exc).__name__}); the API log has the traceback")


# Every refusal's body: FastAPI's list of validation faults, or one message; the code in both.
_ERROR_SCHEMA: dict[str, Any] = {
    "title": "Error",
    "type": "object",
    "required": ["detail", "code"],
    "properties": {
        "detail": {
            "anyOf": [{"type": "string"}, {"type": "array", "items": {"$ref": "#/components/schemas/ValidationError"}}],
            "description": "A message, or (code invalid_request) the list of faults FastAPI found in the request.",
        },
        "code": {"type": "string", "description": "A code of GET /v1/errors."},
    },
}
ERROR_CODES = "x-error-codes"  # on each error answer of the spec: the codes it comes with, for clients and tests
_SAFE_METHODS = frozenset({"get", "head", "options"})


def errors(*codes: str) -> dict[int | str, dict[str, Any]]:
    """FastAPI ``responses=`` for the refusals a route (or the code under it) raises: one answer per HTTP status
    of the codes, listing them with their meanings. What every route can answer is added centrally
    (``install``): 401, the cross-site 403, 413 for a body over the cap, 422 invalid_request, 500 and 503."""
    by_status: dict[int, list[str]] = {}
    for code in codes:
        by_status.setdefault(lookup(code).http_status, []).append(code)
    return {status: _error_answer(listed) for status, listed in by_status.items()}


def _error_answer(codes: list[str]) -> dict[str, Any]:
    """One documented error answer: its codes as a list in the description and as the enum of ``code``."""
    codes = list(dict.fromkeys(codes))
    schema = {**_ERROR_SCHEMA, "properties": {**_ERROR_SCHEMA["properties"], "code": {"type": "string", "enum": codes}}}
    description = "\n".join(f"- `{code}`: {lookup(code).meaning}" for code in codes)
    return {"description": description, ERROR_CODES: codes, "content": {"application/json": {"schema": schema}}}


def _common_codes(path: str, method: str, *, auth: bool, open_paths: frozenset[str]) -> list[str]:
    """The codes any route may answer with, whatever it does: the key check (``api.deps.require_key``, not on
    the open paths), the body cap (``api.body_limit``), request validation and the database or a bug."""
    codes = []
    if path not in open_paths:
        if auth:
            codes.append(UNAUTHORIZED)
        if method not in _SAFE_METHODS:
            codes.append(CROSS_SITE_REFUSED)
    codes.append(UPLOAD_TOO_LARGE if path.startswith(UPLOAD_PREFIXES) else REQUEST_TOO_LARGE)
    if method not in _SAFE_METHODS:
        codes.append(UNPARSABLE_BODY)
    return [*codes, INVALID_REQUEST, INTERNAL_ERROR, DATABASE_UNAVAILABLE]


def _document_errors(spec: dict[str, Any], *, auth: bool, open_paths: frozenset[str]) -> dict[str, Any]:
    """The spec with each operation's error answers: those its route declares (``errors``) and the common ones,
    one per status, each listing its codes (the ``{detail, code}`` body above, ``code`` one of them)."""
    for path, item in spec.get("paths", {}).items():
        for method, operation in item.items():
            if not isinstance(operation, dict):
                continue
            responses: dict[str, Any] = operation.setdefault("responses", {})
            by_status: dict[str, list[str]] = {}
            for status, answer in list(responses.items()):
                if ERROR_CODES in answer or status == "422":  # FastAPI's own 422 is replaced by ours
                    by_status[status] = list(answer.get(ERROR_CODES, []))
                    del responses[status]
            for code in _common_codes(path, method, auth=auth, open_paths=open_paths):
                by_status.setdefault(str(lookup(code).http_status), []).append(code)
            for status in sorted(by_status):
                responses[status] = _error_answer(by_status[status])
    return spec


def install(app: FastAPI, *, auth: bool, open_paths: frozenset[str]) -> None:
    """The error handlers, and the spec's error answers: ``auth`` (keys are checked) adds 401 to every path
    but ``open_paths`` (``api.deps.open_paths``)."""
    base_openapi = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = _document_errors(base_openapi(), auth=auth, open_paths=open_paths)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented way to extend the spec
    app.add_exception_handler(VlbatchError, _vlbatch_error)
    app.add_exception_handler(RequestValidationError, _invalid_request)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(DBAPIError, _database_error)
    app.add_exception_handler(Exception, _unexpected)

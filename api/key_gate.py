"""The key check, before a request's body is read: pure ASGI, outermost in the app.

A dependency runs only after FastAPI has read and parsed the body (a multipart upload spooled to disk, a JSON
body parsed in memory), so a client with no key could make the API take in all it sends before its 401. Here
the key is read from the headers and looked up first; a request without a live key is answered 401 (or a
cross-site write 403) and its body is never received. The principal found is left in the request's state,
where ``api.deps.get_principal`` takes it without a second lookup.

Open paths (``api.deps.open_paths``) pass as they are, and so does the dashboard (``/ui``), which checks its own
cookie; its bodies are small forms under ``VLBATCH_MAX_REQUEST_BYTES`` (``api.body_limit``).
"""

from __future__ import annotations

import json
import logging

from anyio import to_thread
from sqlalchemy.exc import DBAPIError
from starlette.datastructures import Headers

from api.body_limit import ASGIApp, Receive, Scope, Send
from api.deps import KEYLESS, SAFE_METHODS, UNKNOWN_KEY, Principal, open_paths
from api.http_errors import unavailable
from vlbatch.db.keys import find_key
from vlbatch.errors import CROSS_SITE_REFUSED, DATABASE_UNAVAILABLE, UNAUTHORIZED, lookup
from vlbatch.settings import Settings

log = logging.getLogger(__name__)

_KEY_REQUIRED = "an API key is required: send 'Authorization: Bearer <key>' or 'X-API-Key'"


class KeyGate:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        settings: Settings = scope["app"].state.settings
        path = str(scope.get("path", ""))
        headers = Headers(scope=scope)
        if path in open_paths(settings) or path == "/ui" or path.startswith("/ui/"):
            await self.app(scope, receive, send)
            return
        if scope["method"] not in SAFE_METHODS and headers.get("sec-fetch-site") in ("cross-site", "same-site"):
            await _refuse(send, CROSS_SITE_REFUSED, "state-changing requests from another site are refused")
            return
        if settings.access.auth == "off":
            principal: Principal | None = KEYLESS
        else:
            secret = _secret(headers)
            if not secret:
                await _refuse(
                    send, UNAUTHORIZED, "an API key is required: send 'Authorization: Bearer <key>' or 'X-API-Key'"
                )
                return
            try:
                principal = await to_thread.run_sync(_principal_of, scope["app"].state.sessionmaker, secret)
            except DBAPIError as exc:  # outside the app's handlers: answered here as they would
                if not unavailable(exc):
                    raise
                log.warning("database unavailable checking a key on %s: %s", path, exc)
                await _refuse(send, DATABASE_UNAVAILABLE, "the database cannot be reached to check the API key")
                return
            if principal is None:  # the message never repeats the key
                await _refuse(send, UNAUTHORIZED, UNKNOWN_KEY)
                return
        scope.setdefault("state", {})["principal"] = principal
        await self.app(scope, receive, send)


def _secret(headers: Headers) -> str | None:
    """The key as ``api.deps`` reads it: a bearer token, else the ``X-API-Key`` header."""
    scheme, _, credentials = headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and credentials.strip():
        return credentials.strip()
    return headers.get("x-api-key") or None


def _principal_of(sessionmaker: object, secret: str) -> Principal | None:
    with sessionmaker() as session:  # type: ignore[operator]
        key = find_key(session, secret=secret)
        return None if key is None else Principal(tenant=key.tenant, is_admin=key.is_admin, key_id=key.id)


async def _refuse(send: Send, code: str, message: str) -> None:
    # The body is left unread: ``connection: close`` tells the client this connection takes no next request.
    body = json.dumps({"detail": message, "code": code}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]
    if code == UNAUTHORIZED:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": lookup(code).http_status, "headers": headers})
    await send({"type": "http.response.body", "body": body})

"""Annotated dependencies: settings, a DB session per request, and who is asking (``PrincipalDep``).

Every route but ``/healthz`` and ``/readyz`` takes a key (``VLBATCH_AUTH=off`` only for an embedded or dev
API). A route that reads or writes tenant rows takes ``principal: PrincipalDep`` and scopes by it:

- a new row gets ``tenant=principal.tenant``;
- a lookup filters by ``principal.scope`` (the tenant, or None for an admin, who sees every tenant), e.g.
  ``job_store.get_job(session, job_id=..., tenant=principal.scope)``, or for a table of its own
  ``stmt.where(Table.tenant == principal.tenant)`` unless ``principal.is_admin``;
- a row of another tenant is answered as missing (404, its not-found code), never 403, so an id does not
  confirm that it exists.

``api.main`` puts ``require_key`` on the whole app, so a route is never open by omission (only
``open_paths``); ``AdminDep`` is for admin-only routes.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.routing import APIRoute
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from api.http_errors import RequestRefused
from vlbatch.db.keys import find_key
from vlbatch.db.models import DEFAULT_TENANT
from vlbatch.errors import ADMIN_REQUIRED, CROSS_SITE_REFUSED, UNAUTHORIZED
from vlbatch.settings import Settings


def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def get_session(request: Request) -> Iterator[Session]:
    with request.app.state.sessionmaker() as session:
        yield session


SettingsDep = Annotated[Settings, Depends(get_settings)]
SessionDep = Annotated[Session, Depends(get_session)]


def _closing_sessions(endpoint: Callable[..., Any]) -> Callable[..., Any]:
    """``endpoint``, closing the sessions it was given as soon as it returns.

    Why: FastAPI validates a plain (sync) route's answer in a thread of the same pool the routes run in, and a
    ``yield`` dependency's teardown comes after that. Left to the teardown, a finished route's session keeps its
    pooled connection until a thread is free to validate its answer; under load every thread can be a route
    waiting for a connection, every connection a finished route waiting for a thread, and all of them wait out
    the pool timeout (200 concurrent creates on PostgreSQL: two answered, then 500s). Closed here, a connection
    is only held by a route that is running, so a route waiting for one always gets it. A route's answer is
    built from its rows before it returns (response models, never ORM objects), so nothing reads the session
    after."""
    if inspect.iscoroutinefunction(endpoint):
        return endpoint

    @functools.wraps(endpoint)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return endpoint(*args, **kwargs)
        finally:
            for value in kwargs.values():
                if isinstance(value, Session):
                    value.close()

    return run


class SessionClosingRoute(APIRoute):
    """The route class of the routers whose routes take a session: it is closed when the endpoint returns."""

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        super().__init__(path, _closing_sessions(endpoint), **kwargs)


@dataclass(frozen=True)
class Principal:
    """Who a request acts for: a tenant, whether it is an admin, and the key it came with (None: auth off)."""

    tenant: str
    is_admin: bool
    key_id: int | None

    @property
    def scope(self) -> str | None:
        """The tenant a lookup is confined to; None for an admin, who sees every tenant."""
        return None if self.is_admin else self.tenant

    @property
    def who(self) -> str:
        """The principal as a tag edit records it: the tenant and the key's id (``vlbatch keys list``)."""
        return f"{self.tenant}/key-{self.key_id}" if self.key_id is not None else f"{self.tenant}/local"


# Both are what clients send: the OpenAI client sends ``Authorization: Bearer``; curl users often X-API-Key.
# auto_error=False: a missing header is our 401 with its code, not FastAPI's 403.
_bearer = HTTPBearer(auto_error=False, description="An API key from `vlbatch keys create`.")
_api_key = APIKeyHeader(name="X-API-Key", auto_error=False, description="The same key, in a header of its own.")
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# A 401 for a key this server does not know says where keys live: the usual cause is a key made by `vlbatch keys
# create` into another database (the SQLite default where the shell had no VLBATCH_DATABASE_URL).
UNKNOWN_KEY = (
    "the API key is unknown or revoked in this server's database; `vlbatch keys create` stores a key in the database"
    " its own VLBATCH_DATABASE_URL names (./vlbatch.db when unset): run it with the server's"
)
KEYLESS = Principal(tenant=DEFAULT_TENANT, is_admin=True, key_id=None)  # every request under VLBATCH_AUTH=off


BearerDep = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
ApiKeyDep = Annotated[str | None, Depends(_api_key)]


def _authenticate(
    request: Request,
    settings: Settings,
    session: Session,
    bearer: HTTPAuthorizationCredentials | None,
    api_key: str | None,
) -> Principal:
    # A browser marks a request another site made it send; no client of this API is a web page elsewhere, so a
    # state-changing one is refused even with auth off (a form POST on a dev host's port).
    if request.method not in SAFE_METHODS and request.headers.get("sec-fetch-site") in ("cross-site", "same-site"):
        raise RequestRefused(CROSS_SITE_REFUSED, "state-changing requests from another site are refused")
    if settings.access.auth == "off":
        return KEYLESS
    secret = bearer.credentials if bearer is not None else api_key
    if not secret:
        raise RequestRefused(UNAUTHORIZED, "an API key is required: send 'Authorization: Bearer <key>' or 'X-API-Key'")
    key = find_key(session, secret=secret)
    principal = None if key is None else Principal(tenant=key.tenant, is_admin=key.is_admin, key_id=key.id)
    # The route runs in another thread hop, which may wait for a free thread: the lookup's connection goes back
    # to the pool now rather than wait with it (see ``_closing_sessions``). The session opens a new one if used.
    session.close()
    if principal is None:  # the message never repeats the key
        raise RequestRefused(UNAUTHORIZED, UNKNOWN_KEY)
    return principal


def get_principal(
    request: Request, settings: SettingsDep, session: SessionDep, bearer: BearerDep, api_key: ApiKeyDep
) -> Principal:
    """Who the request acts for (401 without a live key); looked up once per request."""
    cached = getattr(request.state, "principal", None)
    if isinstance(cached, Principal):
        return cached
    principal = _authenticate(request, settings, session, bearer, api_key)
    request.state.principal = principal
    return principal


def open_paths(settings: Settings) -> frozenset[str]:
    """The paths served without a key: the probes, and the docs or metrics when a setting opens them."""
    paths = {"/healthz", "/readyz"}
    if settings.access.auth_open_docs:
        paths |= {"/docs", "/openapi.json"}
    if settings.access.auth_open_metrics:
        paths.add("/metrics")
    return frozenset(paths)


def require_key(
    request: Request, settings: SettingsDep, session: SessionDep, bearer: BearerDep, api_key: ApiKeyDep
) -> None:
    """The app-wide gate (``api.main``): every route but ``open_paths`` takes a key, whatever it declares.
    The dashboard (``/ui``) checks its own cookie instead (``api.routes.ui``): a browser sends no header."""
    path = request.url.path
    if path not in open_paths(settings) and path != "/ui" and not path.startswith("/ui/"):
        get_principal(request, settings, session, bearer, api_key)


PrincipalDep = Annotated[Principal, Depends(get_principal)]


def require_admin(principal: PrincipalDep) -> Principal:
    if not principal.is_admin:
        raise RequestRefused(ADMIN_REQUIRED, "this route takes an admin key")
    return principal


AdminDep = Annotated[Principal, Depends(require_admin)]


def require_metrics_reader(
    request: Request, settings: SettingsDep, session: SessionDep, bearer: BearerDep, api_key: ApiKeyDep
) -> None:
    """``/metrics`` shows every worker and chip, no tenant's own: an admin key, unless VLBATCH_AUTH_OPEN_METRICS."""
    if not settings.access.auth_open_metrics:
        require_admin(get_principal(request, settings, session, bearer, api_key))

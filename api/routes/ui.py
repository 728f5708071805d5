"""The web dashboard under ``/ui``: jobs, a job's progress and chips, a results browser with thumbnails, and the
tenant's webhook endpoints with their newest deliveries (``/ui/webhooks``, read only).

Server-rendered (Jinja2, autoescaped), no script from anywhere else. A browser cannot send an
``Authorization`` header, so ``/ui/login`` takes an API key once and opens a server-side session
(``vlbatch.db.dashboard_sessions``): the cookie (HttpOnly, ``SameSite=Strict``, scoped to ``/ui``) holds the random
session id, never the key, so a copied cookie is no API key and stops working at logout, at expiry or when the key
is revoked. Every page checks it as the API checks the header (same tenant scoping: another tenant's job is not
found). State-changing forms, the login too, refuse what a browser marks as sent by another site or another origin,
no page may be framed or cached, and no answer sniffed as another type (``api.security_headers``). Behind a TLS
proxy the cookie is ``Secure`` once the proxy is trusted (``VLBATCH_TRUSTED_PROXIES``, ``cli.serve``). With
``VLBATCH_AUTH=off`` no login is asked.

While a job runs, the job page and the job list fetch their live part again every few seconds and swap it in (a
few lines of script in ``base.html``, ours), until the page says the job ended. Each card names its file; the
thumbnails are ``api.thumbnails``', a placeholder naming the code where none can be made.

The results browser pages by item seq. Filtering by tag reads at most ``SCAN`` items per page (the tags live
in each result's JSON), then offers the next page, so a 5M-item job never turns into one huge scan. Each card
shows its tags with their source (the model's, or added by hand) and takes tags added or removed by hand
(``jobs.actions.edit_tags``, as the API's PATCH route).
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import timedelta
from pathlib import Path, PurePosixPath
from typing import Annotated, Any
from urllib.parse import urlsplit

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from sqlalchemy.orm import Session

from api.deps import KEYLESS, Principal, SessionClosingRoute, SessionDep, SettingsDep
from api.http_errors import RequestRefused
from api.job_views import found_job, job_out
from api.params import ItemId
from api.progress_chart import progress_svg
from api.thumbnails import BUSY, NoThumbnail, Thumbnailer, placeholder_jpeg
from jobs import actions, webhook_endpoints
from vlbatch.db import dashboard, job_store, tenants
from vlbatch.db.dashboard_sessions import end_session, find_session_key, open_session
from vlbatch.db.keys import find_key
from vlbatch.db.models import DeviceSample, Item
from vlbatch.errors import CROSS_SITE_REFUSED
from vlbatch.settings import Settings

router = APIRouter(route_class=SessionClosingRoute, prefix="/ui", include_in_schema=False)
templates = Jinja2Templates(directory=str(Path(__file__).resolve().parents[1] / "templates"))

COOKIE = "vlbatch_session"
# What ``/ui/login?error=<code>`` may show: a fixed text per code, so a link cannot put words on the login page.
LOGIN_ERRORS = {
    "unknown_key": "That key is unknown or revoked.",
    "session_ended": "Your session ended (logged out, expired, or its key was revoked); log in again.",
}
THUMBNAIL_ERROR_HEADER = "X-Vlbatch-Thumbnail-Error"  # why a thumbnail answer is a placeholder: an error code
PAGE = 60  # thumbnails per results page
SCAN = 5000  # items read at most per results page when filtering by tag
SHOWN_DELIVERIES = 20  # each endpoint's newest deliveries on the webhooks page


def _principal(request: Request, settings: Settings, session: Session) -> Principal | None:
    if settings.access.auth == "off":
        return KEYLESS
    secret = request.cookies.get(COOKIE)
    key = find_session_key(session, secret=secret) if secret else None
    return Principal(tenant=key.tenant, is_admin=key.is_admin, key_id=key.id) if key is not None else None


def _same_site(request: Request) -> None:
    """Refuses a form posted by another site: by ``Sec-Fetch-Site`` where the browser sends it, else by ``Origin``
    (older browsers; every browser's POST carries it), whose host and port must be the ``Host`` the browser asked
    (the scheme is left out: behind a TLS proxy that is not trusted the request reads http where the page was
    https). ``Origin: null`` (a sandboxed frame, a ``data:`` page) is no origin of ours either. A request with
    neither header is no browser's form post, so it goes through (scripts, curl)."""
    if request.headers.get("sec-fetch-site") in ("cross-site", "same-site"):
        raise RequestRefused(CROSS_SITE_REFUSED, "state-changing requests from another site are refused")
    origin = request.headers.get("origin")
    if origin is not None and urlsplit(origin).netloc.lower() != request.headers.get("host", "").lower():
        raise RequestRefused(CROSS_SITE_REFUSED, "state-changing requests from another origin are refused")


def _login(request: Request) -> RedirectResponse:
    """To the login page; saying why when the browser still holds a session id that no longer works."""
    ended = "?error=session_ended" if request.cookies.get(COOKIE) else ""
    return RedirectResponse(f"/ui/login{ended}", status_code=303)


@router.get("/login", response_class=HTMLResponse)
def login_form(request: Request, error: str | None = None) -> Response:
    """``error`` is a code of ``LOGIN_ERRORS``; anything else shows no message (never the text it was given)."""
    return templates.TemplateResponse(request, "login.html", {"error": LOGIN_ERRORS.get(error or "")})


@router.post("/login")
def login(
    request: Request, settings: SettingsDep, session: SessionDep, key: Annotated[str, Form(max_length=200)]
) -> Response:
    _same_site(request)
    resp = RedirectResponse("/ui", status_code=303)
    if settings.access.auth == "off":
        return resp
    found = find_key(session, secret=key.strip())
    if found is None:
        return templates.TemplateResponse(
            request, "login.html", {"error": LOGIN_ERRORS["unknown_key"]}, status_code=401
        )
    lifetime = timedelta(hours=settings.dashboard.dashboard_session_hours)
    secret = open_session(session, key_id=found.id, lifetime=lifetime)
    session.commit()
    resp.set_cookie(
        COOKIE,
        secret,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/ui",
        max_age=int(lifetime.total_seconds()),
    )
    return resp


@router.post("/logout")
def logout(request: Request, session: SessionDep) -> Response:
    """Ends the session server-side: the cookie's id works nowhere after this, also where it was copied to."""
    _same_site(request)
    if secret := request.cookies.get(COOKIE):
        end_session(session, secret=secret)
        session.commit()
    resp = RedirectResponse("/ui/login", status_code=303)
    resp.delete_cookie(COOKIE, path="/ui")
    return resp


@router.get("", response_class=HTMLResponse)
def jobs_page(request: Request, settings: SettingsDep, session: SessionDep) -> Response:
    principal = _principal(request, settings, session)
    if principal is None:
        return _login(request)
    jobs = [job_out(session, settings, j) for j in job_store.list_jobs(session, tenant=principal.scope, limit=100)]
    live = any(j.status in job_store.ACTIVE_JOB_STATES for j in jobs)
    return templates.TemplateResponse(request, "jobs.html", {"jobs": jobs, "principal": principal, "live": live})


@router.get("/webhooks", response_class=HTMLResponse)
def webhooks_page(request: Request, settings: SettingsDep, session: SessionDep) -> Response:
    """The tenant's webhook endpoints, each with its newest deliveries and their attempts."""
    principal = _principal(request, settings, session)
    if principal is None:
        return _login(request)
    endpoints = [
        {
            "endpoint": e,
            "deliveries": webhook_endpoints.deliveries(session, row=e, limit=SHOWN_DELIVERIES, status=None),
        }
        for e in webhook_endpoints.listed(session, scope=principal.scope)
    ]
    return templates.TemplateResponse(request, "webhooks.html", {"endpoints": endpoints, "principal": principal})


def _chips(session: Session, job_id: str) -> list[DeviceSample]:
    """The newest reading of each chip that worked on the job."""
    rows = dashboard.job_chip_samples(session, job_id=job_id)
    newest: dict[tuple[str, int], DeviceSample] = {}
    for row in rows:
        newest.setdefault((row.worker, row.device_id), row)
    return sorted(newest.values(), key=lambda r: (r.worker, r.device_id))


def _results(
    session: Session, job_id: str, *, after: int, tag: str | None, error: str | None
) -> tuple[list[dict[str, Any]], int | None]:
    page = dashboard.item_page(
        session, job_id=job_id, after=after, limit=SCAN if tag else PAGE, error=error, succeeded_only=bool(tag)
    )
    rows, last = [], None
    for item in page:  # records (``vlbatch.db.results``): their tags fall back to the output's as every reader's
        last = item.seq
        decoded = item.output
        output = decoded if isinstance(decoded, dict) else {}
        tags = item.tags
        if tag and tag not in (item.tag_names or []):
            continue
        editable = item.has_result and tags is not None
        name, source = _file_name(item.inputs)
        rows.append(
            {
                "item": item,
                "tags": tags or [],
                "editable": editable,
                "caption": output.get("caption"),
                "output": output,
                "name": name or item.ref or str(item.item_id),
                "source": source,
                "ref": item.ref if item.ref not in (None, source) else None,  # a name the client gave, shown too
                # The API reads local files and data URLs only, never a URL for a page view (``api.thumbnails``).
                "local": source is None or "://" not in source or source[:7].lower() == "file://",
            }
        )
        if len(rows) == PAGE:
            break
    more = last if last is not None and (len(rows) == PAGE or (tag and last is not None)) else None
    return rows, more


def _file_name(inputs: object) -> tuple[str | None, str | None]:
    """(the file's name, its whole path or URL) of an item's first image or its document, for its card; a data
    URL has no name."""
    if not isinstance(inputs, dict):
        return None, None
    images = inputs.get("images")
    source = images[0] if isinstance(images, list) and images else inputs.get("path")
    if not isinstance(source, str):
        return None, None
    if source[:5].lower() == "data:":
        return "inline image", None
    path = urlsplit(source).path if "://" in source else source
    return PurePosixPath(path).name or source, source


def _tag_counts(session: Session, job_id: str) -> list[tuple[str, int]]:
    """The commonest tags among the job's first results: the filter's choices."""
    counts: Counter[str] = Counter()
    for result in dashboard.result_tags(session, job_id=job_id, limit=2000):
        counts.update(result.tag_names or [])
    return counts.most_common(40)


@router.get("/jobs/{job_id}", response_class=HTMLResponse)
def job_page(
    request: Request,
    job_id: str,
    settings: SettingsDep,
    session: SessionDep,
    tag: Annotated[str | None, Query(max_length=200)] = None,
    error: Annotated[str | None, Query(max_length=64)] = None,
    after: Annotated[int, Query(ge=-1, le=2**62)] = -1,
) -> Response:
    principal = _principal(request, settings, session)
    if principal is None:
        return _login(request)
    job = found_job(session, job_id, principal)
    rows, more = _results(session, job_id, after=after, tag=tag, error=error)
    errors = dashboard.failures(session, job_id=job_id, limit=200)
    codes = Counter(code for code, _ in errors if code)
    context = {
        "job": job_out(session, settings, job, price_per_kwh=settings.telemetry.price_per_kwh),
        "job_row": job,
        "options": job_store.shaping_options(job.options),  # what shaped every answer (``options_hash``'s input)
        "rows": rows,
        "more": more,
        "tag": tag,
        "error": error,
        "tags": _tag_counts(session, job_id),
        "error_codes": codes.most_common(),
        "failures": errors[:50],
        "chips": _chips(session, job_id),
        "document": job.pipeline in ("summarize", "extract", "classify"),
        "json": json,
        "principal": principal,
        "chart": progress_svg(session, job_id=job_id, total=job.total, started_at=job.started_at),
        "live": job.status in job_store.ACTIVE_JOB_STATES,  # the page refreshes itself until the job ends
    }
    return templates.TemplateResponse(request, "job.html", context)


@router.get("/jobs/{job_id}/thumbs/{item_id}.jpg")
def thumb(request: Request, job_id: str, item_id: int, settings: SettingsDep, session: SessionDep) -> Response:
    principal = _principal(request, settings, session)
    if principal is None:
        return Response(status_code=401)
    job = found_job(session, job_id, principal)
    item = session.get(Item, item_id)
    if item is None or item.job_id != job_id:
        return Response(status_code=404)
    roots = tenants.roots_of(session, settings, job.tenant).inputs  # the job's tenant's, as its worker reads
    inputs = item.inputs
    session.close()  # a decode may take seconds: its connection goes back to the pool meanwhile
    thumbnailer: Thumbnailer = request.app.state.thumbnailer
    path = thumbnailer.path(job_id=job_id, item_id=item_id, roots=roots, inputs=inputs)
    if path is BUSY:
        return Response(status_code=503, headers={"Retry-After": "2"})
    if isinstance(path, NoThumbnail):
        # A placeholder naming the code, never a broken image: 200 when a decoder tried (the card has its picture),
        # 404 when there was nothing local to read; the code also in a header for scripts.
        return Response(
            placeholder_jpeg(path.code),
            status_code=200 if path.readable else 404,
            media_type="image/jpeg",
            headers={THUMBNAIL_ERROR_HEADER: path.code, "Cache-Control": "private, max-age=60"},
        )
    return FileResponse(path, media_type="image/jpeg", headers={"Cache-Control": "private, max-age=3600"})


@router.post("/jobs/{job_id}/retry-failed")
def retry_failed(request: Request, job_id: str, settings: SettingsDep, session: SessionDep) -> Response:
    _same_site(request)
    principal = _principal(request, settings, session)
    if principal is None:
        return _login(request)
    actions.retry_failed(session, settings, found_job(session, job_id, principal))
    return RedirectResponse(f"/ui/jobs/{job_id}", status_code=303)


@router.post("/jobs/{job_id}/items/{item_id}/tags")
def edit_tags(
    request: Request,
    job_id: str,
    item_id: ItemId,
    settings: SettingsDep,
    session: SessionDep,
    add: Annotated[str, Form(max_length=200)] = "",
    remove: Annotated[str, Form(max_length=200)] = "",
) -> Response:
    """A tag added or removed by hand on a results card; back to the job's page."""
    _same_site(request)
    principal = _principal(request, settings, session)
    if principal is None:
        return _login(request)
    adds, removes = [t for t in [add.strip()] if t], [t for t in [remove.strip()] if t]
    job = found_job(session, job_id, principal)
    actions.edit_tags(session, settings, job, item_id=item_id, add=adds, remove=removes, author=principal.who)
    return RedirectResponse(f"/ui/jobs/{job_id}", status_code=303)

"""The FastAPI application factory (OpenAPI at /docs)."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse

from api import http_errors
from api.body_limit import BodyLimit
from api.deps import open_paths, require_key
from api.key_gate import KeyGate
from api.routes import (
    batches,
    error_codes,
    files,
    health,
    jobs,
    metrics,
    pipelines,
    queues,
    results,
    ui,
    webhooks,
)
from api.security_headers import FrameDenied
from api.text_check import refuse_bad_url_text
from api.thumbnails import Thumbnailer
from jobs.janitor import janitor_forever
from jobs.reconciler import reconcile_forever
from jobs.webhooks import start_sender
from vlbatch.db.session import make_engine, make_sessionmaker, migrate
from vlbatch.settings import Settings, get_settings


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        migrate(settings.database.database_url)
        engine = make_engine(settings.database.database_url)
        app.state.settings = settings
        app.state.sessionmaker = make_sessionmaker(engine)
        app.state.thumbnailer = Thumbnailer(settings)
        # The API reconciles too: chunks whose send failed (broker down) go out once it is back, even while no
        # engine worker is up to run the reconciler.
        stop = threading.Event()
        if settings.scheduling.api_reconcile:
            threading.Thread(
                target=reconcile_forever, args=(settings, app.state.sessionmaker, stop), name="reconciler", daemon=True
            ).start()
        # The janitor runs where file bytes and thumbnails live (the API's data dir); a lease keeps it to one host.
        if settings.retention.janitor_interval_s:
            threading.Thread(
                target=janitor_forever, args=(settings, app.state.sessionmaker, stop), name="janitor", daemon=True
            ).start()
        start_sender(settings, app.state.sessionmaker, stop, batches_too=True)
        yield
        stop.set()
        app.state.thumbnailer.close()
        engine.dispose()

    # Every route takes a key (api.deps.require_key), the docs too: they are routes of the app here rather than
    # FastAPI's own, which no dependency reaches.
    app = FastAPI(
        title="vlbatch",
        version="0.1.0",
        lifespan=lifespan,
        dependencies=[Depends(require_key), Depends(refuse_bad_url_text)],
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )

    @app.get("/openapi.json", include_in_schema=False)
    def openapi() -> JSONResponse:
        return JSONResponse(app.openapi())

    @app.get("/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url="/openapi.json", title="vlbatch")

    http_errors.install(app, auth=settings.access.auth != "off", open_paths=open_paths(settings))
    app.add_middleware(
        BodyLimit, max_bytes=settings.http.max_request_bytes, max_upload_bytes=settings.uploads.max_upload_bytes
    )
    app.add_middleware(KeyGate)  # no body is read before the key is checked
    app.add_middleware(FrameDenied)  # outermost: refusals made by the other middleware carry the headers too
    app.include_router(batches.router)
    app.include_router(error_codes.router)
    app.include_router(files.router)
    app.include_router(health.router)
    app.include_router(jobs.router)
    app.include_router(results.router)
    app.include_router(metrics.router)
    app.include_router(pipelines.router)
    app.include_router(queues.router)
    app.include_router(webhooks.router)
    app.include_router(ui.router)
    return app

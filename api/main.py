"""The FastAPI application factory (OpenAPI at /docs)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from api import errors
from api.routes import error_codes, health, jobs, metrics, pipelines
from vlbatch.db.session import make_engine, make_sessionmaker, migrate
from vlbatch.settings import Settings, get_settings


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        migrate(settings.database_url)
        engine = make_engine(settings.database_url)
        app.state.settings = settings
        app.state.sessionmaker = make_sessionmaker(engine)
        yield
        engine.dispose()

    app = FastAPI(title="vlbatch", version="0.1.0", lifespan=lifespan)
    errors.install(app)
    app.include_router(error_codes.router)
    app.include_router(health.router)
    app.include_router(jobs.router)
    app.include_router(metrics.router)
    app.include_router(pipelines.router)
    return app

"""The long-running services: ``api``, ``worker``, and one ``reconcile`` pass by hand.

The API's server is uvicorn with h11, not httptools: h11 stops buffering a request head at
``VLBATCH_HTTP_MAX_HEADER_BYTES`` (400, connection closed), where httptools reads a head of any size (a 100 MiB
header was parsed whole before any check). ``HeaderCount`` then refuses more than ``VLBATCH_HTTP_MAX_HEADERS``
fields. Forwarded headers are believed from ``VLBATCH_TRUSTED_PROXIES`` only (uvicorn's ``forwarded_allow_ips``),
so behind a TLS proxy the request's scheme is https and the dashboard's cookie is Secure.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from cli.error_lines import shown_url
from vlbatch.errors import VlbatchError
from vlbatch.settings import Settings, flat_field, get_settings

if TYPE_CHECKING:
    import uvicorn
    from starlette.types import ASGIApp


# The settings each service reads, listed under its --help (the whole list: the settings page, or
# ``vlbatch.settings.Settings``). Each is a field of the settings, read as VLBATCH_<NAME>.
WORKER_SETTINGS = (
    "model_path",
    "model_name",
    "engine",
    "database_url",
    "broker_url",
    "allowed_input_roots",
    "worker_queues",
    "worker_concurrency",
    "cpu_kv_cache_share",
    "platform",
    "visible_devices",
    "celery_node",
    "heartbeat_file",
    "drain_timeout_s",
)
API_SETTINGS = ("database_url", "broker_url", "allowed_input_roots", "model_name", "data_dir", "trusted_proxies")


def _epilog(names: tuple[str, ...]) -> str:
    """The environment variables a command reads, one paragraph each (Typer keeps paragraphs apart), with the
    setting's own description."""
    lines = ["Environment (or .env):"]
    for name in names:
        field = flat_field(name)
        shown = field.default_factory is None and not field.is_required() and field.default not in (None, "", [], {})
        default = f" (default {field.default})" if shown else ""
        lines.append(f"VLBATCH_{name.upper()}: {field.description or ''}{default}")
    return "\n\n".join(lines)


WORKER_EPILOG = _epilog(WORKER_SETTINGS)
API_EPILOG = _epilog(API_SETTINGS)


def _server_config(app: ASGIApp, settings: Settings, *, host: str, port: int) -> uvicorn.Config:
    """The API server's configuration: its bounds on a request head and the proxies it believes."""
    import uvicorn

    from api.header_limits import HeaderCount

    return uvicorn.Config(
        HeaderCount(app, max_headers=settings.http.http_max_headers),
        host=host,
        port=port,
        log_config=None,  # uvicorn's lines go through the root logger: one format for the whole process (vlbatch.logs)
        http="h11",
        h11_max_incomplete_event_size=settings.http.http_max_header_bytes,
        proxy_headers=True,
        forwarded_allow_ips=settings.access.trusted_proxies,
    )


def api(host: str = "127.0.0.1", port: int = 8000) -> None:
    """Serve the REST API (OpenAPI at /docs)."""
    import uvicorn

    from api.main import create_app

    settings = get_settings()
    _preflight(settings, broker_required=False)
    uvicorn.Server(_server_config(create_app(), settings, host=host, port=port)).run()


def worker() -> None:
    """Run one engine worker (one engine, one process) for VLBATCH_MODEL_PATH, configured by the environment below.
    With no VLBATCH_ENGINE it starts with the model's own context and, on a CPU host, a KV cache sized from the model;
    `vlbatch doctor` checks the settings without loading anything."""
    from worker.celery_worker import engine_config
    from worker.celery_worker import main as worker_main

    settings = get_settings()
    if (
        settings.model.model_path
    ):  # engine settings that cannot start end here, before the database and broker are reached
        engine_config(settings)
    _preflight(settings, broker_required=True)
    worker_main()


def _preflight(settings: Settings, *, broker_required: bool) -> None:
    """Reach the database (and bring its schema up) and the broker before serving, so a wrong URL, a missing role or a
    server that is down ends the start in one line (``cli.error_lines``) rather than in a traceback after the engine
    load or inside the server's start-up. The API stays up without a broker (its reconciler sends what waited); a worker
    cannot."""
    import logging

    from cli.error_lines import check_broker
    from vlbatch.db.session import migrate

    log = logging.getLogger("vlbatch.serve")
    migrate(settings.database.database_url)
    log.info("database %s is current", shown_url(settings.database.database_url))
    try:
        check_broker(settings.broker.broker_url)
    except VlbatchError as exc:
        if broker_required:
            raise
        log.warning("%s; jobs are stored and sent once it is reachable", exc.message)


def migrate() -> None:
    """Bring the database schema to the newest revision (the cluster's migration Job runs this once)."""
    from vlbatch.db.session import migrate as upgrade

    upgrade(get_settings().database.database_url)
    typer.echo("schema is current")


def reconcile() -> None:
    """One reconciler pass: re-enqueue chunks the broker lost or whose lease expired."""
    from datetime import timedelta

    from jobs.reconciler import reconcile_once
    from vlbatch.db.session import make_engine, make_sessionmaker, migrate

    settings: Settings = get_settings()
    migrate(settings.database.database_url)
    report = reconcile_once(
        settings,
        make_sessionmaker(make_engine(settings.database.database_url)),
        stale_after=timedelta(seconds=settings.scheduling.unclaimed_resend_s),
    )
    typer.echo(f"re-enqueued {report.sent} chunks" + (" (broker unreachable)" if report.broker_down else ""))
    for model, n in sorted(report.waiting.items()):
        typer.echo(f"{n} chunks for model {model!r} were sent several times and never claimed: is a worker up?")


def gc(
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print what would be deleted; delete nothing.")] = False,
) -> None:
    """Delete what expired now (docs/retention.md): rows per table and bytes, one line each. The API's janitor does
    the same every VLBATCH_JANITOR_INTERVAL_S; while another host's pass holds the lease this one is refused
    (janitor_busy)."""
    from jobs.janitor import plan, sweep
    from vlbatch.db.session import make_engine, make_sessionmaker, migrate
    from vlbatch.errors import JANITOR_BUSY, VlbatchError

    settings: Settings = get_settings()
    migrate(settings.database.database_url)
    sessions = make_sessionmaker(make_engine(settings.database.database_url))
    report = plan(settings, sessions) if dry_run else sweep(settings, sessions)
    if not report.ran:
        raise VlbatchError("another host's janitor is running a pass; try again when it ends", code=JANITOR_BUSY)
    verb = "would delete" if dry_run else "deleted"
    for line in report.lines():
        typer.echo(f"{verb}\t{line}")

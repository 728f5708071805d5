"""The long-running services: ``api``, ``worker``, and one ``reconcile`` pass by hand."""

from __future__ import annotations

import typer

from vlbatch.settings import Settings, get_settings


def api(host: str = "127.0.0.1", port: int = 8000) -> None:
    """Serve the REST API (OpenAPI at /docs)."""
    import uvicorn

    from api.main import create_app

    uvicorn.run(create_app(), host=host, port=port)


def worker() -> None:
    """Run one engine worker (one engine, one process) for VLBATCH_MODEL_PATH."""
    from worker.celery_worker import main as worker_main

    worker_main()


def migrate() -> None:
    """Bring the database schema to the newest revision (the cluster's migration Job runs this once)."""
    from vlbatch.db.session import migrate as upgrade

    upgrade(get_settings().database_url)
    typer.echo("schema is current")


def reconcile() -> None:
    """One reconciler pass: re-enqueue chunks the broker lost or whose lease expired."""
    from datetime import timedelta

    from jobs.reconciler import reconcile_once
    from vlbatch.db.session import make_engine, make_sessionmaker, migrate

    settings: Settings = get_settings()
    migrate(settings.database_url)
    report = reconcile_once(
        settings,
        make_sessionmaker(make_engine(settings.database_url)),
        stale_after=timedelta(seconds=settings.unclaimed_resend_s),
    )
    typer.echo(f"re-enqueued {report.sent} chunks" + (" (broker unreachable)" if report.broker_down else ""))
    for model, n in sorted(report.waiting.items()):
        typer.echo(f"{n} chunks for model {model!r} were sent several times and never claimed: is a worker up?")

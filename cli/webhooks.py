"""``vlbatch webhooks``: every tenant's webhook endpoints and their deliveries, as an operator sees them in the
database (tenants manage their own through ``/v1/webhooks``). No secrets are printed."""

from __future__ import annotations

from typing import Annotated

import typer

from vlbatch.settings import Settings, get_settings

app = typer.Typer(
    help="Webhook endpoints and their deliveries (tenants manage theirs with /v1/webhooks).", no_args_is_help=True
)


@app.command("list")
def webhooks_list() -> None:
    """Every endpoint: id, tenant, enabled or why not, events, URL."""
    from jobs import webhook_endpoints
    from vlbatch.db.session import make_engine, make_sessionmaker, migrate

    settings: Settings = get_settings()
    migrate(settings.database.database_url)
    with make_sessionmaker(make_engine(settings.database.database_url))() as s:
        for e in webhook_endpoints.listed(s, scope=None):
            state = "enabled" if e.enabled else f"disabled ({e.disabled_reason})"
            typer.echo("\t".join((e.id, e.tenant, state, ",".join(e.events), e.url)))


@app.command("deliveries")
def webhooks_deliveries(
    endpoint_id: Annotated[str, typer.Argument(help="The endpoint's id (`vlbatch webhooks list`).")],
    limit: Annotated[int, typer.Option(min=1, max=1000, help="The newest this many.")] = 20,
) -> None:
    """An endpoint's newest deliveries: id, event, status, created, and each attempt's status or error code and
    latency."""
    from jobs import webhook_endpoints
    from vlbatch.db.session import make_engine, make_sessionmaker, migrate

    settings: Settings = get_settings()
    migrate(settings.database.database_url)
    with make_sessionmaker(make_engine(settings.database.database_url))() as s:
        row = webhook_endpoints.found(s, scope=None, endpoint_id=endpoint_id)
        for view in webhook_endpoints.deliveries(s, row=row, limit=limit, status=None):
            d = view.delivery
            tries = " ".join(f"{a.status_code or a.error_code}/{a.latency_ms}ms" for a in view.attempts) or "-"
            typer.echo("\t".join((d.id, d.event, d.status, f"{d.created_at:%Y-%m-%d %H:%M:%S}", tries)))

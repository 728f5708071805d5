"""``vlbatch keys``: API keys, each acting for one tenant (admin keys for all), stored as hashes."""

from __future__ import annotations

from typing import Annotated

import typer

from vlbatch.settings import Settings, get_settings

app = typer.Typer(help="API keys: each acts for one tenant; admin keys see every tenant.", no_args_is_help=True)


@app.command("create")
def keys_create(
    tenant: Annotated[str, typer.Option(help="The tenant the key acts for (its jobs, templates and files).")],
    admin: Annotated[bool, typer.Option("--admin", help="The key sees and acts on every tenant's rows.")] = False,
    name: Annotated[str | None, typer.Option(help="A label shown by `vlbatch keys list`.")] = None,
) -> None:
    """Make a key and print it once: only its hash is stored, so it cannot be shown again."""
    from vlbatch.db.keys import create_key
    from vlbatch.db.session import make_engine, make_sessionmaker, migrate

    settings: Settings = get_settings()
    migrate(settings.database.database_url)
    with make_sessionmaker(make_engine(settings.database.database_url))() as s:
        made = create_key(s, tenant=tenant, is_admin=admin, name=name)
        s.commit()
    typer.echo(made.secret)
    role = "admin" if admin else "tenant"
    typer.echo(f"key {made.row.id} ({role} key of tenant '{tenant}'); store it now, it is not shown again", err=True)
    typer.echo(database_line(settings), err=True)


def database_line(settings: Settings) -> str:
    """Which database the key went to: an API answers 401 to a key from any other (the usual cause, the SQLite
    default of a shell without VLBATCH_DATABASE_URL)."""
    from sqlalchemy.engine import make_url

    where = make_url(settings.database.database_url).render_as_string(hide_password=True)
    if "database_url" in settings.database.model_fields_set:
        return f"stored in {where}: only an API on this VLBATCH_DATABASE_URL accepts it"
    return (
        f"stored in {where} (VLBATCH_DATABASE_URL is unset): an API on another database answers 401 to it; "
        "set VLBATCH_DATABASE_URL as the API's and create the key again"
    )


@app.command("list")
def keys_list() -> None:
    """Every key: id, tenant, role, name, its first characters, created, revoked. No secrets."""
    from vlbatch.db.keys import list_keys
    from vlbatch.db.session import make_engine, make_sessionmaker, migrate

    settings: Settings = get_settings()
    migrate(settings.database.database_url)
    with make_sessionmaker(make_engine(settings.database.database_url))() as s:
        for k in list_keys(s):
            revoked = f"revoked {k.revoked_at:%Y-%m-%d %H:%M}" if k.revoked_at else "live"
            role = "admin" if k.is_admin else "tenant"
            fields = (k.id, k.tenant, role, k.name or "-", f"{k.prefix}...", f"{k.created_at:%Y-%m-%d %H:%M}", revoked)
            typer.echo("\t".join(map(str, fields)))


@app.command("revoke")
def keys_revoke(key_id: Annotated[int, typer.Argument(help="The key's id (`vlbatch keys list`).")]) -> None:
    """Revoke a key: requests with it get 401 from now on."""
    from vlbatch.db.keys import revoke_key
    from vlbatch.db.session import make_engine, make_sessionmaker, migrate
    from vlbatch.errors import KEY_NOT_FOUND, VlbatchError

    settings: Settings = get_settings()
    migrate(settings.database.database_url)
    with make_sessionmaker(make_engine(settings.database.database_url))() as s:
        if not revoke_key(s, key_id=key_id):
            raise VlbatchError(f"no API key has id {key_id} (see `vlbatch keys list`)", code=KEY_NOT_FOUND)
        s.commit()
    typer.echo(f"key {key_id} revoked")


@app.command("roots")
def keys_roots(
    tenant: Annotated[str | None, typer.Argument(help="The tenant; none: list every tenant's own roots.")] = None,
    input_root: Annotated[
        list[str] | None, typer.Option("--input", help="A folder its jobs may read (repeat for more).")
    ] = None,
    output_root: Annotated[
        list[str] | None,
        typer.Option("--output", help="A folder its document jobs may write into (repeat; default: its inputs)."),
    ] = None,
    s3_prefix: Annotated[
        list[str] | None,
        typer.Option("--s3", help="An s3://bucket/prefix its jobs may read (repeat; default: see below)."),
    ] = None,
    clear: Annotated[bool, typer.Option("--clear", help="Drop its own roots: back to the default.")] = False,
) -> None:
    """A tenant's own roots: set them (--input, --output, --s3; together, each call replaces all three), drop them
    (--clear), or show them. Each lies inside VLBATCH_ALLOWED_INPUT_ROOTS (--s3: VLBATCH_ALLOWED_S3_PREFIXES); a
    tenant without roots or prefixes of its own uses those (none with VLBATCH_TENANT_ROOTS_REQUIRED)."""
    from vlbatch.db import tenants
    from vlbatch.db.session import make_engine, make_sessionmaker, migrate

    settings: Settings = get_settings()
    migrate(settings.database.database_url)
    with make_sessionmaker(make_engine(settings.database.database_url))() as s:
        if tenant is None:
            for row in tenants.list_roots(s):
                outputs = ",".join(row.output_roots) if row.output_roots is not None else "(its inputs)"
                s3 = ",".join(row.s3_prefixes) if row.s3_prefixes is not None else "(the default)"
                typer.echo(f"{row.tenant}\tinputs {','.join(row.input_roots) or '-'}\toutputs {outputs}\ts3 {s3}")
            return
        if clear:
            tenants.clear_roots(s, tenant=tenant)
        elif input_root or output_root or s3_prefix:
            tenants.set_roots(
                s, settings, tenant=tenant, inputs=input_root or [], outputs=output_root, s3_prefixes=s3_prefix
            )
        s.commit()
        roots = tenants.roots_of(s, settings, tenant)
        source = "its own" if roots.own else "the global VLBATCH_ALLOWED_INPUT_ROOTS"
        typer.echo(f"tenant '{tenant}' ({source}): inputs {', '.join(map(str, roots.inputs)) or 'none'}")
        typer.echo(f"tenant '{tenant}' ({source}): outputs {', '.join(map(str, roots.outputs)) or 'none'}")
        typer.echo(f"tenant '{tenant}': object storage {', '.join(roots.s3_prefixes) or 'none'}")


@app.command("retention")
def keys_retention(
    tenant: Annotated[str | None, typer.Argument(help="The tenant; none: list every tenant's own retention.")] = None,
    jobs_s: Annotated[
        int | None,
        typer.Option("--jobs-s", min=0, help="Seconds its ended jobs (items, results) are kept; 0: for ever."),
    ] = None,
    files_s: Annotated[
        int | None, typer.Option("--files-s", min=0, help="Seconds its files are kept from upload; 0: for ever.")
    ] = None,
    clear: Annotated[bool, typer.Option("--clear", help="Drop its own retention: back to the default.")] = False,
) -> None:
    """A tenant's own retention over VLBATCH_RETENTION_JOBS_S and VLBATCH_RETENTION_FILES_S: set it (--jobs-s,
    --files-s; each call replaces both, an option left out takes the default), drop it (--clear), or show it."""
    from vlbatch.db import retention
    from vlbatch.db.session import make_engine, make_sessionmaker, migrate

    settings: Settings = get_settings()
    migrate(settings.database.database_url)

    def shown(seconds: int) -> str:
        return f"{seconds} s" if seconds else "for ever"

    with make_sessionmaker(make_engine(settings.database.database_url))() as s:
        if tenant is None:
            for row in retention.list_retention(s):
                jobs = "(the default)" if row.jobs_s is None else shown(row.jobs_s)
                files = "(the default)" if row.files_s is None else shown(row.files_s)
                typer.echo(f"{row.tenant}\tjobs {jobs}\tfiles {files}")
            return
        if clear:
            retention.clear_retention(s, tenant=tenant)
        elif jobs_s is not None or files_s is not None:
            retention.set_retention(s, tenant=tenant, jobs_s=jobs_s, files_s=files_s)
        s.commit()
        own = retention.policy(s, settings).of(tenant)
        typer.echo(f"tenant '{tenant}': ended jobs kept {shown(own.jobs_s)}, files kept {shown(own.files_s)}")

"""``vlbatch templates``: recurring document jobs (an inbox folder on a cron schedule) and their scheduler."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from vlbatch.settings import get_settings

app = typer.Typer(help="Recurring document jobs: an inbox folder on a cron schedule.", no_args_is_help=True)


def _template_options(task: str, options: str | None, schema: Path | None, labels: str | None) -> dict[str, object]:
    """--options JSON, with --schema (extract) and --labels (classify) folded in; checked later by the pipeline."""
    if schema is not None and task != "extract":
        raise typer.BadParameter("--schema is for --task extract only")
    if labels is not None and task != "classify":
        raise typer.BadParameter("--labels is for --task classify only")
    try:
        opts = json.loads(options) if options else {}
        schema_doc = json.loads(schema.read_text()) if schema is not None else None
    except (json.JSONDecodeError, OSError) as exc:
        raise typer.BadParameter(f"--options/--schema: {exc}") from exc
    if not isinstance(opts, dict):
        raise typer.BadParameter('--options must be a JSON object, e.g. \'{"language": "de"}\'')
    if schema is not None:
        opts["json_schema"] = schema_doc
    if labels is not None:
        opts["labels"] = [lab.strip() for lab in labels.split(",") if lab.strip()]
    return opts


@app.command("add")
def templates_add(
    name: Annotated[str, typer.Argument(help="Unique template name.")],
    inbox: Annotated[Path, typer.Option(help="Folder the documents are dropped into (inside the allowed roots).")],
    task: Annotated[str, typer.Option(help="summarize, extract or classify.")],
    model: Annotated[str, typer.Option(help="Served model name the jobs run on.")],
    cron: Annotated[str, typer.Option(help="Five fields in UTC: minute hour day-of-month month day-of-week.")],
    out: Annotated[Path | None, typer.Option(help="Folder for one JSON file per document.")] = None,
    options: Annotated[str | None, typer.Option(help="Pipeline options as a JSON object.")] = None,
    schema: Annotated[Path | None, typer.Option(help="JSON Schema file of the fields to extract (extract).")] = None,
    labels: Annotated[str | None, typer.Option(help="Comma-separated label set (classify).")] = None,
    tenant: Annotated[str, typer.Option(help="The tenant its jobs belong to (API keys of it see them).")] = "default",
) -> None:
    """Add a template: every time CRON fires, the new or changed documents in INBOX become one job."""
    from worker.nightly import open_sessions
    from worker.template_schedule import TemplateError, create_template, next_run_at

    opts = _template_options(task, options, schema, labels)
    from vlbatch.db.tenants import roots_of

    settings = get_settings()
    with open_sessions(settings)() as s:
        roots = roots_of(s, settings, tenant)  # the jobs are the tenant's: its roots, not every global one
        try:
            t = create_template(
                s,
                name=name,
                inbox=str(inbox),
                pipeline=task,
                model=model,
                options=opts,
                cron=cron,
                output_dir=str(out) if out else None,
                allowed_roots=roots.inputs,
                output_roots=roots.outputs,
                tenant=tenant,
            )
        except TemplateError as exc:
            raise typer.BadParameter(str(exc)) from exc
        s.commit()
    typer.echo(f"template {t.name}: {t.pipeline} over {t.inbox}; next run {next_run_at(t.cron, after=t.created_at)}")


@app.command("list")
def templates_list() -> None:
    """Show every template with its schedule, last and next run."""
    from vlbatch.db.job_templates import list_templates
    from worker.nightly import open_sessions
    from worker.template_schedule import next_run_at

    with open_sessions(get_settings())() as s:
        for t in list_templates(s):
            nxt = next_run_at(t.cron, after=t.last_run_at or t.created_at) if t.enabled else "disabled"
            typer.echo(f"{t.name}\t{t.pipeline}\t{t.model}\t{t.cron!r}\tlast {t.last_run_at}\tnext {nxt}\t{t.inbox}")


@app.command("run")
def templates_run(name: Annotated[str, typer.Argument(help="Template to run now, whatever its schedule.")]) -> None:
    """Queue NAME's new and changed documents now; print the job id and the file counts."""
    from worker.nightly import open_sessions, run_template
    from worker.template_schedule import TemplateError

    settings = get_settings()
    try:
        r = run_template(settings, open_sessions(settings), name)
    except TemplateError as exc:
        raise typer.BadParameter(str(exc)) from exc
    if r.skipped:
        raise typer.BadParameter(f"another run of {name!r} claimed it first; nothing queued")
    note = "" if r.published or not r.job_id else " (broker unreachable: the reconciler will send it)"
    typer.echo(f"job {r.job_id or '-'}{note}: {r.new} new, {r.changed} changed, {r.unchanged} unchanged")


@app.command("scheduler")
def templates_scheduler() -> None:
    """Run the scheduler (Celery beat + a solo worker on vlbatch.control). Run exactly one per cluster."""
    from worker.nightly import main as scheduler_main

    scheduler_main()

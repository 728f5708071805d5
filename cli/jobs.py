"""``vlbatch jobs``: the jobs of a running API, through its HTTP client (``cli.remote``)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer

from vlbatch.settings import Settings, get_settings

if TYPE_CHECKING:
    from cli.remote import ApiClient


app = typer.Typer(help="Jobs of a running API (VLBATCH_API_URL, key in VLBATCH_API_KEY).", no_args_is_help=True)


def api_client() -> ApiClient:
    from cli.remote import ApiClient

    settings: Settings = get_settings()
    key = settings.client.api_key.get_secret_value() if settings.client.api_key is not None else None
    return ApiClient(settings.client.api_url, key)


@app.command("submit")
def jobs_submit(
    directory: Annotated[str, typer.Argument(help="Folder on the API's host, inside the key's input roots.")],
    model: Annotated[str | None, typer.Option(help="Served model name; the API's default when omitted.")] = None,
    max_tags: Annotated[
        int | None, typer.Option(min=1, help="Tags per photo (the pipeline's default when omitted).")
    ] = None,
    caption: Annotated[bool, typer.Option(help="Also write a caption per photo.")] = False,
    options: Annotated[
        str | None, typer.Option(help="More tagging options as JSON, e.g. '{\"max_visual_tokens\": 256}'.")
    ] = None,
    priority: Annotated[str, typer.Option(help="Queue: batch or interactive.")] = "batch",
    idempotency_key: Annotated[
        str | None, typer.Option(help="Sent as Idempotency-Key: the same key and request make one job, however often.")
    ] = None,
    watch: Annotated[bool, typer.Option(help="Then follow the job as `vlbatch jobs watch` does.")] = False,
) -> None:
    """Submit a tagging job over DIRECTORY to the API (POST /v1/jobs/tagging with the key); prints the job's id (the
    only line on stdout, for scripts), its item count and any warning on stderr."""
    try:
        opts = json.loads(options) if options else {}
    except json.JSONDecodeError as exc:
        raise typer.BadParameter(f"--options is not JSON: {exc}") from exc
    if not isinstance(opts, dict):
        raise typer.BadParameter("--options must be a JSON object")
    opts |= {k: v for k, v in (("max_tags", max_tags), ("caption", caption or None)) if v is not None}
    body: dict[str, object] = {"directory": directory, "options": opts, "priority": priority}
    if model is not None:
        body["model"] = model
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
    client = api_client()
    job = client.post("/v1/jobs/tagging", body, headers=headers)
    typer.echo(job["id"])
    typer.echo(f"{job['total']} items, {job['status']}, model {job['model']}", err=True)
    for warning in job.get("warnings", []):
        typer.echo(f"warning: {warning}", err=True)
    if watch:
        from cli.remote import every_item_failed, watch_job

        done = watch_job(client, job["id"])
        raise typer.Exit(0 if done["status"] == "finished" and not every_item_failed(done) else 1)


@app.command("list")
def jobs_list(
    limit: Annotated[int, typer.Option(min=1, help="Newest jobs to show.")] = 20,
    status: Annotated[str | None, typer.Option(help="Only jobs in this state.")] = None,
) -> None:
    """The newest jobs, one line each: id, status, progress, failures, pipeline, model, items/s."""
    from cli.remote import job_line

    for job in api_client().jobs(limit=limit, status=status):
        typer.echo(job_line(job))


@app.command("show")
def jobs_show(job_id: Annotated[str, typer.Argument(help="The job's id.")]) -> None:
    """One job as the API reports it (JSON)."""
    typer.echo(json.dumps(api_client().job(job_id), indent=2))


@app.command("watch")
def jobs_watch(
    job_id: Annotated[str, typer.Argument(help="The job's id.")],
    interval: Annotated[float, typer.Option(min=0.1, help="Seconds between polls.")] = 2.0,
) -> None:
    """A progress bar with items/s and ETA until the job has ended; exit code 0 when it finished with at least one
    item succeeded, else 1."""
    from cli.remote import every_item_failed, watch_job

    job = watch_job(api_client(), job_id, interval_s=interval)
    typer.echo(f"{job_id}: {job['status']}")
    raise typer.Exit(0 if job["status"] == "finished" and not every_item_failed(job) else 1)


@app.command("estimate")
def jobs_estimate(
    directory: Annotated[str, typer.Argument(help="Folder on the API's host, inside an allowed root.")],
    pipeline: Annotated[str, typer.Option(help="A pipeline of GET /v1/pipelines.")] = "image_tagging",
    options: Annotated[str | None, typer.Option(help="The pipeline's options as JSON.")] = None,
    model: Annotated[str | None, typer.Option(help="Served model name; the API's default when omitted.")] = None,
    deadline: Annotated[str | None, typer.Option(help="ISO time with a zone, e.g. 2026-12-05T07:00:00+00:00.")] = None,
) -> None:
    """What a job over DIRECTORY would run, estimated by the API (a dry run: nothing is stored): items, tokens,
    engine time, Wh and cost, each with its assumption, and whether it meets DEADLINE."""
    from cli.estimates import print_estimate

    try:
        opts = json.loads(options) if options else {}
    except json.JSONDecodeError as exc:
        raise typer.BadParameter(f"--options is not JSON: {exc}") from exc
    body = {"pipeline": pipeline, "directory": directory, "options": opts, "dry_run": True}
    body |= {k: v for k, v in (("model", model), ("deadline", deadline)) if v is not None}
    print_estimate(api_client().post("/v1/jobs", body))

"""What a job leaves behind, read from the database: ``energy`` (its Wh and cost) and ``xmp`` (its sidecars)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from vlbatch.settings import Settings, get_settings


def energy(job_id: Annotated[str, typer.Argument(help="The job whose energy to show.")]) -> None:
    """A job's energy: Wh, Wh per 1,000 items and, with VLBATCH_PRICE_PER_KWH, its cost."""
    from vlbatch.db import job_store
    from vlbatch.db.energy import describe, job_energy
    from vlbatch.db.session import make_engine, make_sessionmaker

    settings: Settings = get_settings()
    with make_sessionmaker(make_engine(settings.database.database_url))() as s:
        job = job_store.get_job(s, job_id=job_id)
        if job is None:
            typer.echo(f"no job {job_id}", err=True)
            raise typer.Exit(1)
        counts = job_store.item_counts(s, job_id=job.id)
    done = counts["succeeded"] + counts["failed"]
    typer.echo(f"job {job.id} ({job.pipeline}, {job.status}): {done}/{job.total} items done")
    typer.echo(
        describe(job_energy(job, items_done=done, price_per_kwh=settings.telemetry.price_per_kwh), items_done=done)
    )


def xmp(
    job_id: Annotated[str, typer.Argument(help="A finished (or running) tagging job.")],
    out: Annotated[Path | None, typer.Option(help="Write sidecars here instead of beside the photos.")] = None,
    relative_to: Annotated[
        Path | None, typer.Option(help="With --out: mirror the photos' paths below this folder.")
    ] = None,
    naming: Annotated[
        str, typer.Option(help="ext: photo.jpg.xmp (darktable, digiKam, Immich); stem: photo.xmp.")
    ] = "ext",
    jpeg_copies: Annotated[
        Path | None, typer.Option(help="Also write JPEG copies carrying the XMP here (originals are never written).")
    ] = None,
    force: Annotated[bool, typer.Option(help="Replace sidecars that vlbatch did not write.")] = False,
    keyword_root: Annotated[
        str | None,
        typer.Option(help="Parent of the model's keywords (AI|<tag>, AI/<tag>); default VLBATCH_XMP_KEYWORD_ROOT."),
    ] = None,
) -> None:
    """Write a tagging job's tags and captions as XMP sidecars (dc:subject, lr:hierarchicalSubject, digiKam:TagsList,
    dc:description), the model's keywords marked and the answer's provenance in vlbatch's namespace."""
    from jobs.exports.xmp import write_job_sidecars
    from jobs.exports.xmp_packet import root_levels
    from vlbatch.db.models import Job
    from vlbatch.db.session import make_engine, make_sessionmaker, migrate
    from vlbatch.db.tenants import roots_of
    from vlbatch.errors import JOB_NOT_FOUND, VlbatchError

    if naming not in ("ext", "stem"):
        raise typer.BadParameter("--naming is ext or stem")
    settings: Settings = get_settings()
    root = settings.xmp.xmp_keyword_root if keyword_root is None else keyword_root
    if not root_levels(root):
        raise typer.BadParameter("--keyword-root needs a name: machine-made keywords must carry a mark")
    migrate(settings.database.database_url)
    with make_sessionmaker(make_engine(settings.database.database_url))() as session:
        job = session.get(Job, job_id)
        if job is None:  # a mistyped id must not look like a job with nothing to write
            raise VlbatchError(f"no job {job_id}", code=JOB_NOT_FOUND)
        own = roots_of(session, settings, job.tenant)
        report = write_job_sidecars(
            session,
            roots=own.outputs if own.own else None,  # a tenant's own roots bound its sidecars
            job_id=job_id,
            out_dir=out,
            relative_to=relative_to,
            naming="ext" if naming == "ext" else "stem",
            jpeg_copies=jpeg_copies,
            force=force,
            keyword_root=root,
        )
    typer.echo(
        f"sidecars written {report.written}, kept (not ours) {report.kept_foreign}, jpeg copies {report.jpeg_copies},"
        f" skipped: failed {report.skipped_failed}, not a local file {report.skipped_not_local},"
        f" outside the tenant's roots {report.skipped_outside_roots}, errors {report.errors}"
    )

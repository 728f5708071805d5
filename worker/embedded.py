"""Runs a job in this process with no broker: the same feeder and engine as the Celery worker, fed from
the job's chunk list instead of the queue."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.runtime.config import EngineConfig
from engine.runtime.occupancy import OccupancySnapshot
from engine.vision import model_takes_video
from jobs.exports.files import write_export
from jobs.item_streams import ItemStream
from jobs.request import JobRequest
from jobs.submit import submit
from pipelines import image_tagging, registry
from vlbatch.db import job_store
from vlbatch.db.session import make_engine, make_sessionmaker, migrate
from vlbatch.errors import NO_INPUTS, VlbatchError
from vlbatch.inputs import iter_files, iter_images
from vlbatch.settings import Settings
from worker.context import WorkerContext
from worker.energy import energy_booker
from worker.feeder import EngineBroken, Feeder, FeederStats
from worker.lent_engine import run_engine
from worker.startup import build_context


class NothingToDo(VlbatchError):
    """The folder holds no input files the job could take (images, or documents)."""

    code = NO_INPUTS


@dataclass(frozen=True)
class EmbeddedRun:
    job_id: str
    counts: dict[str, int]
    rows_written: int
    out: Path
    load_seconds: float
    run_seconds: float
    stats: FeederStats = field(default_factory=FeederStats)
    occupancy: OccupancySnapshot | None = None  # over the run (engine steps and running requests)
    timeline: list[tuple[float, int, float | None]] = field(default_factory=list)  # (s, items done, mean running)


@dataclass(frozen=True)
class JobRun:
    stats: FeederStats
    occupancy: OccupancySnapshot
    timeline: list[tuple[float, int, float | None]]


def run_job(
    ctx: WorkerContext,
    job_id: str,
    *,
    on_progress: Callable[[int], None] | None = None,
    sample_every_s: float = 1.0,
    give_up: bool = True,
) -> JobRun:
    """Feed every chunk of ``job_id`` through one feeder until all are written. The engine's canary runs first;
    when the engine fails it again after the breaker's back-off, ``EngineBroken`` stops the run with the items
    still queued: there is no other worker to wait for (``give_up=False`` waits for the engine to heal)."""
    feeder = Feeder(
        ctx,
        on_written=on_progress,
        energy=energy_booker(ctx.settings, ctx.sessions, worker=ctx.owner),
        # The samples are the measured rate a later dry run of the same model reads (jobs.estimate).
        sample_interval_s=ctx.settings.worker.engine_sample_interval_s,
        give_up=give_up,
    )
    start_occ = ctx.runner.occupancy()
    started = time.monotonic()
    timeline: list[tuple[float, int, float | None]] = []
    last = start_occ

    def sample() -> None:
        nonlocal last
        snap = ctx.runner.occupancy()
        timeline.append((time.monotonic() - started, feeder.stats.items_done, snap.mean_running_since(last)))
        last = snap
        if feeder.broken is not None:
            raise EngineBroken(feeder.broken)

    try:
        feeder.check_engine()
        # A breaker that opens hands its held chunks back: after it closes, the chunks still undone are fed again.
        while chunk_ids := _chunks_left(ctx, job_id):
            done_before, feeder.handed_back = feeder.stats.items_done, False
            for cid in chunk_ids:  # claimed as soon as the feeder has room: it holds enough to keep the engine full
                while not feeder.wait_for_room(sample_every_s):
                    sample()
                feeder.add_chunk(cid)
                if time.monotonic() - started >= sample_every_s * (len(timeline) + 1):
                    sample()
            while not feeder.wait_idle(sample_every_s):
                sample()
            sample()
            if feeder.stats.items_done == done_before and not feeder.handed_back:
                break  # another pass would change nothing (chunks held elsewhere, say)
    finally:
        feeder.close()
    end_occ = ctx.runner.occupancy()
    mean = OccupancySnapshot(
        end_occ.steps - start_occ.steps,
        end_occ.running_sum - start_occ.running_sum,
        end_occ.waiting_sum - start_occ.waiting_sum,
        end_occ.capacity,
        end_occ.source,
    )
    return JobRun(feeder.stats, mean, timeline)


def _chunks_left(ctx: WorkerContext, job_id: str) -> list[int]:
    with ctx.sessions() as s:
        return job_store.chunks_left(s, job_id=job_id)


def tag_directory(
    settings: Settings,
    *,
    directory: Path,
    model_dir: Path,
    opts: image_tagging.TaggingOptions,
    out: Path,
    on_start: Callable[[int], None] | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> EmbeddedRun:
    """Tag every image and video below ``directory`` with the engine in this process; results go to SQL and
    ``out``."""
    root = directory.resolve()

    def walked() -> Iterator[job_store.NewItem]:  # streamed into the job as the folder is walked
        paths = (str(p) for p in iter_images(root, recursive=True, roots=[root], videos=True))
        return job_store.streamed_path_items(paths, images_per_prompt=opts.images_per_prompt)

    items = ItemStream(walked, empty=NothingToDo(f"no image files under {directory}"))  # nor videos
    per_prompt = opts.images_per_prompt
    if opts.video_input == "images" or not model_takes_video(model_dir):  # clips' frames go as images too
        per_prompt = max(per_prompt, opts.frames_per_prompt)
    return run_embedded(
        settings.model_copy(update={"engine": {"limit_images_per_prompt": per_prompt, **settings.runtime.engine}}),
        root=root,
        model_dir=model_dir,
        pipeline=image_tagging.PIPELINE.name,
        options=opts.model_dump(),
        items=items,
        out=out,
        on_start=on_start,
        on_progress=on_progress,
    )


def run_documents(
    settings: Settings,
    *,
    directory: Path,
    model_dir: Path,
    pipeline: str,
    options: dict[str, Any],
    out: Path,
    output_dir: Path | None = None,
    on_start: Callable[[int], None] | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> EmbeddedRun:
    """Run a document pipeline over every document below ``directory`` in this process."""
    from preprocessing.documents import EXTENSIONS

    opts = registry.document_pipeline(pipeline).options(options)
    root = directory.resolve()

    def walked() -> Iterator[job_store.NewItem]:
        for path in iter_files(root, suffixes=EXTENSIONS, recursive=True, roots=[root]):
            yield job_store.document_path_items([str(path)])[0]

    empty = NothingToDo(f"no documents ({', '.join(sorted(EXTENSIONS))}) under {directory}")
    items = ItemStream(walked, empty=empty)
    return run_embedded(
        settings,
        root=root,
        model_dir=model_dir,
        pipeline=pipeline,
        options=opts.model_dump(),
        items=items,
        out=out,
        output_dir=output_dir,
        on_start=on_start,
        on_progress=on_progress,
    )


def run_embedded(
    settings: Settings,
    *,
    root: Path,
    model_dir: Path,
    pipeline: str,
    options: dict[str, Any],
    items: Sequence[job_store.NewItem] | ItemStream,
    out: Path,
    output_dir: Path | None = None,
    on_start: Callable[[int], None] | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> EmbeddedRun:
    """Create the job in SQL, load the engine here (or take the one lent to this process: ``worker.lent_engine``),
    run every chunk, export the results."""
    roots = [root, *([output_dir.resolve()] if output_dir else [])]
    settings = settings.model_copy(
        update={"allowed_input_roots": roots, "model_path": str(model_dir), "tenant_roots_required": False}
    )
    migrate(settings.database.database_url)
    sessions = make_sessionmaker(make_engine(settings.database.database_url))
    name = settings.model.served_model_name or model_dir.name
    request = JobRequest(
        pipeline=pipeline,
        model=name,
        options=options,
        items=items,
        output_dir=str(output_dir.resolve()) if output_dir else None,
    )
    with sessions() as s:  # fed below from its chunk list, not the broker; the local user's own job, no quotas
        job = submit(s, settings, request, publish=False, admit=False)
    config = EngineConfig.model_validate({**settings.runtime.engine, "model": str(model_dir)})
    with run_engine(config, ledger=settings.runtime.engine_load_ledger) as (runner, lent):
        started = time.perf_counter()
        ctx = build_context(settings, runner, model_dir=model_dir, model_name=name, loaded=lent)
        loaded = time.perf_counter()
        if on_start:
            on_start(job.total)
        try:
            run = run_job(ctx, job.id, on_progress=on_progress)
        finally:
            ctx.pool.shutdown()
    finished = time.perf_counter()
    n = write_export(sessions, job.id, out)
    with sessions() as s:
        counts = job_store.item_counts(s, job_id=job.id)
    return EmbeddedRun(
        job.id, counts, n, out, loaded - started, finished - loaded, run.stats, run.occupancy, run.timeline
    )

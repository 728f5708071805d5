"""Runs a job in this process with no broker: the same processor and engine, chunks fed two at a time."""

from __future__ import annotations

import csv
import json
import os
import socket
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from engine.config import EngineConfig
from engine.runner import EngineRunner
from engine.vision import VisionGeometry
from pipelines import image_tagging
from pipelines.registry import options_for
from vlbatch.db import crud
from vlbatch.db.session import make_engine, make_sessionmaker, migrate
from vlbatch.inputs import iter_files, iter_images
from vlbatch.settings import Settings
from worker.processor import ProcessorContext, process_chunk


class NothingToDo(ValueError):
    """The folder holds no input files the job could take (images, or documents)."""


@dataclass(frozen=True)
class EmbeddedRun:
    job_id: str
    counts: dict[str, int]
    rows_written: int
    out: Path
    load_seconds: float
    run_seconds: float


def run_job(ctx: ProcessorContext, job_id: str, *, on_progress: Callable[[int], None] | None = None) -> None:
    with ctx.sessions() as s:
        chunk_ids = crud.chunks_of(s, job_id=job_id)
    # Two chunks in flight: one is prepared while the other decodes, so the engine does not drain.
    with ThreadPoolExecutor(max_workers=ctx.settings.worker_concurrency) as feeders:
        for n in feeders.map(lambda cid: process_chunk(ctx, cid), chunk_ids):
            if on_progress:
                on_progress(n)


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
    """Tag every image below ``directory`` with the engine in this process; results go to SQL and ``out``."""
    root = directory.resolve()
    paths = [str(p) for p in iter_images(root, recursive=True, roots=[root])]
    if not paths:
        raise NothingToDo(f"no image files under {directory}")
    items = crud.items_from_paths(paths, images_per_prompt=opts.images_per_prompt)
    return run_embedded(
        settings.model_copy(update={"engine": {"limit_images_per_prompt": opts.images_per_prompt, **settings.engine}}),
        root=root,
        model_dir=model_dir,
        pipeline=image_tagging.NAME,
        options=opts.model_dump(),
        items=items,
        chunk_size=settings.chunk_size,
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

    opts = options_for(pipeline, options)
    root = directory.resolve()
    paths = [str(p) for p in iter_files(root, suffixes=EXTENSIONS, recursive=True, roots=[root])]
    if not paths:
        raise NothingToDo(f"no documents ({', '.join(sorted(EXTENSIONS))}) under {directory}")
    items = [crud.NewItem(inputs={"path": p}, ref=p) for p in paths]
    return run_embedded(
        settings,
        root=root,
        model_dir=model_dir,
        pipeline=pipeline,
        options=opts.model_dump(),
        items=items,
        chunk_size=settings.document_chunk_size,
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
    items: list[crud.NewItem],
    chunk_size: int,
    out: Path,
    output_dir: Path | None = None,
    on_start: Callable[[int], None] | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> EmbeddedRun:
    """Create the job in SQL, load the engine here, run every chunk, export the results."""
    import time

    roots = [root, *([output_dir.resolve()] if output_dir else [])]
    settings = settings.model_copy(update={"allowed_input_roots": roots, "model_path": str(model_dir)})
    migrate(settings.database_url)
    sessions = make_sessionmaker(make_engine(settings.database_url))
    name = settings.served_model_name or model_dir.name
    with sessions() as s:
        job = crud.create_job(
            s,
            pipeline=pipeline,
            model=name,
            options=options,
            items=items,
            chunk_size=chunk_size,
            output_dir=str(output_dir.resolve()) if output_dir else None,
        )
        s.commit()
    runner = EngineRunner(EngineConfig.model_validate({**settings.engine, "model": str(model_dir)}))
    started = time.perf_counter()
    runner.load()
    loaded = time.perf_counter()
    ctx = ProcessorContext(
        settings=settings,
        sessions=sessions,
        runner=runner,
        model_name=name,
        owner=f"{socket.gethostname()}:{os.getpid()}",
        pool=ThreadPoolExecutor(max_workers=settings.preprocess_threads, thread_name_prefix="prep"),
        geometry=VisionGeometry.from_model_dir(model_dir),
    )
    if on_start:
        on_start(len(items))
    try:
        run_job(ctx, job.id, on_progress=on_progress)
    finally:
        ctx.pool.shutdown()
        runner.close()
    finished = time.perf_counter()
    n = export(sessions, job.id, out)
    with sessions() as s:
        counts = crud.item_counts(s, job_id=job.id)
    return EmbeddedRun(job.id, counts, n, out, loaded - started, finished - loaded)


def result_rows(sessions: sessionmaker[Session], job_id: str) -> Iterator[dict[str, Any]]:
    """Every finished item of a job with its result, in item order, read a page at a time."""
    after = -1
    while True:
        with sessions() as s:
            page = crud.list_results(s, job_id=job_id, after_seq=after, limit=1000)
        if not page:
            return
        for item, res in page:
            output = (res.output or {}) if res else {}
            yield {
                "seq": item.seq,
                "ref": item.ref,
                **({"images": item.inputs["images"]} if "images" in item.inputs else {}),
                "status": item.status,
                "error_code": item.error_code,
                "error_message": item.error_message,
                # Tagging rows keep tags and caption flat (one CSV column each); other pipelines nest.
                **(
                    {"tags": output.get("tags"), "caption": output.get("caption")}
                    if "images" in item.inputs
                    else {"output": res.output if res else None}
                ),
                "raw_text": res.raw_text if res else None,
                "prompt_tokens": res.prompt_tokens if res else 0,
                "completion_tokens": res.completion_tokens if res else 0,
                "model": res.model if res else None,
                "pipeline_version": res.pipeline_version if res else None,
                "options_hash": res.options_hash if res else None,
            }
        after = page[-1][0].seq


def export(sessions: sessionmaker[Session], job_id: str, out: Path) -> int:
    """Write every finished item as JSONL (or CSV when ``out`` ends in .csv); returns the row count."""
    out.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with out.open("w", newline="" if out.suffix == ".csv" else None) as fh:
        writer: csv.DictWriter[str] | None = None
        for row in result_rows(sessions, job_id):
            if out.suffix == ".csv":
                if writer is None:
                    writer = csv.DictWriter(fh, fieldnames=list(row))
                    writer.writeheader()
                writer.writerow({k: json.dumps(v) if isinstance(v, list | dict) else v for k, v in row.items()})
            else:
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")
            n += 1
    return n

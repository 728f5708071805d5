"""The ``vlbatch`` command line."""

from __future__ import annotations

import logging
import os
import socket
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Annotated

import typer

from vlbatch.settings import Settings, get_settings

app = typer.Typer(help="Batch vision/text jobs on vLLM.", no_args_is_help=True)


@app.command()
def tag(
    directory: Annotated[Path, typer.Argument(help="Folder of photos.")],
    model: Annotated[Path, typer.Option(help="Model directory.")],
    out: Annotated[Path, typer.Option(help="Results file (.jsonl or .csv).")] = Path("vlbatch-out/results.jsonl"),
    max_tags: int = 10,
    caption: bool = False,
    images_per_prompt: int = 1,
    max_visual_tokens: int = 256,
    vocabulary: Annotated[str | None, typer.Option(help="Comma-separated closed tag list.")] = None,
) -> None:
    """Tag every photo in DIRECTORY in this process (SQLite, no broker)."""
    from tqdm import tqdm

    from engine.config import EngineConfig
    from engine.runner import EngineRunner
    from pipelines import image_tagging
    from vlbatch.db import crud
    from vlbatch.db.session import make_engine, make_sessionmaker, migrate
    from vlbatch.inputs import iter_images
    from worker.embedded import export, run_job
    from worker.processor import ProcessorContext

    base = get_settings()
    root = directory.resolve()
    settings = base.model_copy(update={"allowed_input_roots": [root], "model_path": str(model)})
    opts = image_tagging.TaggingOptions(
        max_tags=max_tags,
        caption=caption,
        images_per_prompt=images_per_prompt,
        max_visual_tokens=max_visual_tokens,
        vocabulary=[v for v in vocabulary.split(",")] if vocabulary else None,
    )
    paths = [str(p) for p in iter_images(root, recursive=True, roots=[root])]
    if not paths:
        raise typer.BadParameter(f"no images found under {directory}")
    k = opts.images_per_prompt
    items = crud.items_from_paths(paths, images_per_prompt=k)
    migrate(settings.database_url)
    sessions = make_sessionmaker(make_engine(settings.database_url))
    name = settings.served_model_name or model.name
    with sessions() as s:
        job = crud.create_job(
            s,
            pipeline=image_tagging.NAME,
            model=name,
            options=opts.model_dump(),
            items=items,
            chunk_size=settings.chunk_size,
        )
        s.commit()
    engine_args = {"limit_images_per_prompt": max(k, 1), **settings.engine}
    runner = EngineRunner(EngineConfig.model_validate({**engine_args, "model": str(model)}))
    runner.load()
    ctx = ProcessorContext(
        settings=settings,
        sessions=sessions,
        runner=runner,
        model_name=name,
        owner=f"{socket.gethostname()}:{os.getpid()}",
        pool=ThreadPoolExecutor(max_workers=settings.preprocess_threads),
    )
    try:
        with tqdm(total=len(items), unit="item", desc="tagging") as bar:
            run_job(ctx, job.id, on_progress=bar.update)
    finally:
        runner.close()
    n = export(sessions, job.id, out)
    with sessions() as s:
        counts = crud.item_counts(s, job_id=job.id)
    typer.echo(f"job {job.id}: {counts['succeeded']} succeeded, {counts['failed']} failed; {n} rows -> {out}")


@app.command()
def api(host: str = "127.0.0.1", port: int = 8000) -> None:
    """Serve the REST API (OpenAPI at /docs)."""
    import uvicorn

    from api.main import create_app

    uvicorn.run(create_app(), host=host, port=port)


@app.command()
def worker() -> None:
    """Run one engine worker (one engine, one process) for VLBATCH_MODEL_PATH."""
    from worker.celery_worker import main as worker_main

    worker_main()


@app.command()
def reconcile() -> None:
    """One reconciler pass: re-enqueue chunks the broker lost or whose lease expired."""
    from datetime import timedelta

    from vlbatch.db.session import make_engine, make_sessionmaker, migrate
    from worker.reconciler import reconcile_once

    settings: Settings = get_settings()
    migrate(settings.database_url)
    n = reconcile_once(
        settings,
        make_sessionmaker(make_engine(settings.database_url)),
        stale_after=timedelta(seconds=settings.lease_seconds),
    )
    typer.echo(f"re-enqueued {n} chunks")


@app.command()
def doctor(
    kernels: Annotated[bool, typer.Option("--kernels", help="Also run the kernel parity harness.")] = False,
    require_npu: Annotated[
        bool | None, typer.Option("--require-npu/--no-require-npu", help="Default: required when devices are set.")
    ] = None,
) -> None:
    """Check devices, driver mounts, versions and settings; exit 1 with one line per problem."""
    from vlbatch.doctor import main as doctor_main

    raise typer.Exit(doctor_main(kernels=kernels, require_npu=require_npu))


@app.command()
def plan(
    model: Annotated[Path, typer.Argument(help="Model directory or its config.json.")],
    quant: Annotated[str, typer.Option(help="fp16, w8a8 or w4a8.")] = "fp16",
    card: str = "atlas-300i-duo",
    cards: int = 1,
    device_ids: Annotated[str | None, typer.Option(help="npu-smi Device ids, e.g. 0,1,4,5.")] = None,
    max_model_len: int = 8192,
    visual_tokens: int = 1024,
    images_per_prompt: int = 1,
    prompt_tokens: int = 256,
    output_tokens: int = 256,
    gpu_memory_utilization: float | None = None,
    max_num_seqs: int | None = None,
    tp: int | None = None,
    accounting: Annotated[str, typer.Option(help="310P KV accounting: halved (>=0.18) or legacy.")] = "halved",
    efficiency: float = 0.5,
    compose: Annotated[bool, typer.Option("--compose", help="Print a compose file for this layout.")] = False,
    image: str = "vlbatch:310p",
) -> None:
    """Size weights, KV cache, layout, rooflines and launch arguments for MODEL on a device set."""
    from engine.plan_cmd import parse_ids, run_plan
    from engine.planner import PlanError

    try:
        ids = parse_ids(device_ids)
    except PlanError as e:
        typer.echo(f"vlbatch plan: {e}", err=True)
        raise typer.Exit(2) from None
    raise typer.Exit(
        run_plan(
            model,
            compose=compose,
            image=image,
            quantization=quant,
            card=card,
            cards=cards,
            device_ids=ids,
            max_model_len=max_model_len,
            visual_tokens_per_image=visual_tokens,
            images_per_prompt=images_per_prompt,
            prompt_text_tokens=prompt_tokens,
            output_tokens=output_tokens,
            gpu_memory_utilization=gpu_memory_utilization,
            max_num_seqs=max_num_seqs,
            tensor_parallel_size=tp,
            accounting=accounting,
            efficiency=efficiency,
        )
    )


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    app()

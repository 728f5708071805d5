"""The ``vlbatch`` command line."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from pydantic import ValidationError

from vlbatch.settings import Settings, get_settings

# Command bodies import what they run, so `import vlbatch.cli` (every command, `--help`) stays cheap and
# loads neither the pipelines nor the engine.
if TYPE_CHECKING:
    from pipelines.image_tagging import TaggingOptions
    from vlbatch.remote import ApiClient
    from worker.embedded import EmbeddedRun

app = typer.Typer(help="Batch vision/text jobs on vLLM.", no_args_is_help=True)


ENGINE_HELP = "Engine arguments as JSON (engine.runtime.config.EngineConfig fields), over VLBATCH_ENGINE."


def _engine_args(settings: Settings, engine: str | None) -> Settings:
    if not engine:
        return settings
    try:
        extra = json.loads(engine)
    except json.JSONDecodeError as exc:
        raise typer.BadParameter(f"--engine is not JSON: {exc}") from exc
    if not isinstance(extra, dict):
        raise typer.BadParameter("--engine must be a JSON object")
    return settings.model_copy(update={"engine": {**settings.engine, **extra}})


def _run_embedded(
    run: Callable[[Callable[[int], None], Callable[[int], None]], EmbeddedRun], *, unit: str
) -> EmbeddedRun:
    """Run an embedded job with a progress bar (done/total, items/s, ETA) that starts once the engine is loaded."""
    with _progress(unit) as (start, advance):
        return run(start, advance)


@contextmanager
def _progress(unit: str) -> Iterator[tuple[Callable[[int], None], Callable[[int], None]]]:
    """A Rich progress bar for a long command: ``start(total)`` shows it, ``advance(n)`` moves it."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TaskID,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    rate = TextColumn(f"{{task.fields[rate]}} {unit}s/s")
    with Progress(BarColumn(), MofNCompleteColumn(), rate, TimeElapsedColumn(), TimeRemainingColumn()) as progress:
        task: TaskID | None = None

        def start(total: int) -> None:
            nonlocal task
            task = progress.add_task(unit, total=total, rate="-")

        def advance(n: int) -> None:
            if task is not None:
                progress.advance(task, n)
                speed = progress.tasks[task].speed
                progress.update(task, rate=f"{speed:.2f}" if speed else "-")

        yield start, advance


def _run_tagging(settings: Settings, directory: Path, model: Path, opts: TaggingOptions, out: Path) -> EmbeddedRun:
    from worker.embedded import tag_directory

    return _run_embedded(
        lambda start, progress: tag_directory(
            settings, directory=directory, model_dir=model, opts=opts, out=out, on_start=start, on_progress=progress
        ),
        unit="item",
    )


@app.command()
def tag(
    directory: Annotated[Path, typer.Argument(help="Folder of photos.", exists=True, file_okay=False)],
    model: Annotated[Path, typer.Option(help="Model directory.", exists=True, file_okay=False)],
    out: Annotated[Path, typer.Option(help="Results file (.jsonl, .csv or .parquet).")] = Path(
        "vlbatch-out/results.jsonl"
    ),
    max_tags: int = 10,
    caption: bool = False,
    images_per_prompt: int = 1,
    max_visual_tokens: int = 256,
    vocabulary: Annotated[str | None, typer.Option(help="Comma-separated closed tag list.")] = None,
    engine: Annotated[str | None, typer.Option(help=ENGINE_HELP)] = None,
) -> None:
    """Tag every photo in DIRECTORY in this process (SQLite, no broker)."""
    from pipelines.image_tagging import TaggingOptions

    try:
        opts = TaggingOptions(
            max_tags=max_tags,
            caption=caption,
            images_per_prompt=images_per_prompt,
            max_visual_tokens=max_visual_tokens,
            vocabulary=vocabulary.split(",") if vocabulary else None,
        )
    except ValidationError as exc:
        raise typer.BadParameter(str(exc)) from exc
    run = _run_tagging(_engine_args(get_settings(), engine), directory, model, opts, out)
    c = run.counts
    typer.echo(f"job {run.job_id}: {c['succeeded']} succeeded, {c['failed']} failed; {run.rows_written} rows -> {out}")


@app.command("run-batch")
def run_batch(
    input_file: Annotated[
        str, typer.Option("-i", "--input-file", help="Batch JSONL: a path, or a URL the settings allow.")
    ],
    output_file: Annotated[Path, typer.Option("-o", "--output-file", help="Where the answers go (JSONL).")],
    model: Annotated[Path | None, typer.Option(help="Model directory; VLBATCH_MODEL_PATH when omitted.")] = None,
    max_visual_tokens: int = 1024,
    images_per_prompt: int = 4,
    engine: Annotated[str | None, typer.Option(help=ENGINE_HELP)] = None,
) -> None:
    """Answer an OpenAI/vLLM batch file in this process (vLLM run-batch's format; SQLite, no broker)."""
    from pipelines.chat import RequestOptions
    from worker.run_batch import run_batch as run

    settings = _engine_args(get_settings(), engine)
    model_dir = model or (Path(settings.model_path) if settings.model_path else None)
    if model_dir is None or not model_dir.is_dir():
        raise typer.BadParameter("give --model DIR (or VLBATCH_MODEL_PATH) naming a model directory")
    try:
        opts = RequestOptions(max_visual_tokens=max_visual_tokens, images_per_prompt=images_per_prompt)
    except ValidationError as exc:
        raise typer.BadParameter(str(exc)) from exc
    with _progress("request") as (start, advance):
        done = run(
            settings,
            source=input_file,
            out=output_file,
            model_dir=model_dir,
            options=opts,
            on_start=start,
            on_progress=advance,
        )
    typer.echo(f"{done.lines} lines: {done.answered} answered, {done.failed} failed -> {done.out}")


@app.command()
def docs(
    directory: Annotated[
        Path,
        typer.Argument(help="Folder of documents (PDF, DOCX, Markdown, HTML, text).", exists=True, file_okay=False),
    ],
    model: Annotated[Path, typer.Option(help="Model directory.", exists=True, file_okay=False)],
    task: Annotated[str, typer.Option(help="summarize, extract or classify.")] = "summarize",
    schema: Annotated[
        Path | None, typer.Option(help="JSON Schema of the fields to extract (extract).", exists=True, dir_okay=False)
    ] = None,
    labels: Annotated[str | None, typer.Option(help="Comma-separated label set (classify).")] = None,
    options: Annotated[str | None, typer.Option(help="Further pipeline options as JSON.")] = None,
    out: Annotated[Path, typer.Option(help="Results file (.jsonl, .csv or .parquet).")] = Path(
        "vlbatch-out/documents.jsonl"
    ),
    output_dir: Annotated[Path | None, typer.Option(help="Also write one JSON file per document here.")] = None,
    engine: Annotated[str | None, typer.Option(help=ENGINE_HELP)] = None,
) -> None:
    """Summarize, extract from or classify every document in DIRECTORY in this process (SQLite, no broker)."""
    from pipelines import registry
    from pipelines.base import PipelineKind
    from worker.embedded import run_documents

    known = registry.names(PipelineKind.DOCUMENT)
    if task not in known:
        raise typer.BadParameter(f"--task must be one of {', '.join(known)}, not '{task}'")
    try:
        opts: dict[str, object] = json.loads(options) if options else {}
        if schema is not None:
            opts["json_schema"] = json.loads(schema.read_text())
    except json.JSONDecodeError as exc:
        raise typer.BadParameter(f"not JSON: {exc}") from exc
    if labels:
        opts["labels"] = [lab.strip() for lab in labels.split(",") if lab.strip()]
    settings = _engine_args(get_settings(), engine)
    try:
        run = _run_embedded(
            lambda start, progress: run_documents(
                settings,
                directory=directory,
                model_dir=model,
                pipeline=task,
                options=opts,
                out=out,
                output_dir=output_dir,
                on_start=start,
                on_progress=progress,
            ),
            unit="document",
        )
    except (ValidationError, ValueError) as exc:
        raise typer.BadParameter(f"bad {task} options: {exc}") from exc
    c = run.counts
    typer.echo(f"job {run.job_id}: {c['succeeded']} succeeded, {c['failed']} failed; {run.rows_written} rows -> {out}")


@app.command()
def demo(
    workdir: Annotated[Path, typer.Option(help="Where the model, photos, database and results go.")] = Path(
        "vlbatch-demo"
    ),
    photos: Annotated[int, typer.Option(min=1, max=10_000, help="How many sample photos to make.")] = 48,
    engine: Annotated[str | None, typer.Option(help=ENGINE_HELP)] = None,
) -> None:
    """Tag generated sample photos with the shipped tiny tagging model and the real engine, end to end."""
    from vlbatch.demo import DEMO_MODEL_DIR, DEMO_OPTIONS, scene_accuracy, train_demo_model, write_sample_photos

    workdir = workdir.resolve()
    model_dir = DEMO_MODEL_DIR
    if not (model_dir / "model.safetensors").is_file():  # a checkout without the shipped weights
        model_dir = workdir / "tiny-tagger-qwen2-vl"
        if not (model_dir / "model.safetensors").is_file():
            typer.echo(f"training the tiny tagging model into {model_dir} (a few minutes on CPU)")
            train_demo_model(model_dir)
    album = workdir / "photos"
    write_sample_photos(album, count=photos)
    settings = get_settings().model_copy(
        update={"database_url": f"sqlite:///{workdir / 'vlbatch.db'}", "model_name": model_dir.name}
    )
    # Small, CPU-friendly defaults; a fixed KV size avoids sizing the cache as a fraction of RAM.
    defaults = {"dtype": "float32", "max_model_len": 2048, "kv_cache_memory_bytes": 256 << 20, "enforce_eager": True}
    settings = _engine_args(settings.model_copy(update={"engine": {**defaults, **settings.engine}}), engine)
    out = workdir / "results.jsonl"
    run = _run_tagging(settings, album, model_dir, DEMO_OPTIONS, out)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    for row in [r for r in rows if r["status"] == "succeeded"][:5] + [r for r in rows if r["status"] == "failed"][:2]:
        name = Path(row["ref"] or "?").name
        if row["status"] == "succeeded":
            typer.echo(f"  {name:<22} tags={row['tags']} caption={row['caption']!r}")
        else:
            typer.echo(f"  {name:<22} FAILED {row['error_code']}: {row['error_message']}")
    c = run.counts
    typer.echo(
        f"job {run.job_id}: {c['succeeded']} succeeded, {c['failed']} failed of {sum(c.values())}; "
        f"engine loaded in {run.load_seconds:.1f} s, {run.rows_written} items in {run.run_seconds:.2f} s "
        f"({run.rows_written / max(run.run_seconds, 1e-9):.1f} items/s) -> {out}"
    )
    correct, scored = scene_accuracy(rows)
    typer.echo(f"scene tag accuracy: {correct}/{scored} ({correct / max(scored, 1):.0%})")
    typer.echo(
        "The model is a ~1M-parameter Qwen2-VL trained on generated scenes; the pipeline around it is the real "
        "one. Point `vlbatch tag DIR --model /path/to/Qwen2.5-VL-3B-Instruct` at real weights."
    )


@app.command("eval")
def eval_(
    folder: Annotated[Path, typer.Argument(help="Folder of the labelled files.", exists=True, file_okay=False)],
    labels: Annotated[
        Path | None,
        typer.Option(help="Labels file (JSONL or CSV: path -> tags/label/fields); default FOLDER/labels.jsonl."),
    ] = None,
    model: Annotated[Path | None, typer.Option(help="Model directory to evaluate.")] = None,
    compare: Annotated[
        tuple[Path, Path] | None,
        typer.Option(help="Two model directories or results exports (A B): score both and their agreement."),
    ] = None,
    task: Annotated[str, typer.Option(help="tag, or a document pipeline (classify, extract, ...).")] = "tag",
    options: Annotated[str | None, typer.Option(help="Pipeline options as JSON.")] = None,
    schema: Annotated[
        Path | None, typer.Option(help="JSON Schema of the fields to extract (extract).", exists=True, dir_okay=False)
    ] = None,
    engine: Annotated[str | None, typer.Option(help=ENGINE_HELP)] = None,
    engine_a: Annotated[str | None, typer.Option(help="Engine arguments (JSON) for A only, over --engine.")] = None,
    engine_b: Annotated[str | None, typer.Option(help="Engine arguments (JSON) for B only, over --engine.")] = None,
    out: Annotated[Path, typer.Option(help="Folder for eval.json, eval.md and the runs' results.")] = Path(
        "vlbatch-eval"
    ),
    min_f1: Annotated[
        float | None, typer.Option(help="Fail (exit 1) below this tag F1 / accuracy / exact-match.")
    ] = None,
    min_agreement: Annotated[float | None, typer.Option(help="Fail (exit 1) below this A/B agreement.")] = None,
) -> None:
    """Score answers against a labelled set (P/R/F1 per tag, accuracy, exact-match); --compare gates two deployments."""
    from vlbatch.evaluation.labels import read_labels
    from vlbatch.evaluation.run import Side, evaluate

    if (model is None) == (compare is None):
        raise typer.BadParameter("give either --model DIR or --compare A B")
    try:
        opts = json.loads(options) if options else {}
        if schema is not None:
            opts["json_schema"] = json.loads(schema.read_text())
    except json.JSONDecodeError as exc:
        raise typer.BadParameter(f"not JSON: {exc}") from exc
    settings = _engine_args(get_settings(), engine)
    base = settings.engine
    if compare is not None:
        sides = [
            Side("a", compare[0], _engine_args(settings, engine_a).engine),
            Side("b", compare[1], _engine_args(settings, engine_b).engine),
        ]
    else:
        assert model is not None
        sides = [Side("run", model, base)]
    try:
        with _progress("item") as (start, advance):  # a bar per side that runs a job
            result = evaluate(
                settings,
                folder=folder.resolve(),
                labels=read_labels(labels or folder / "labels.jsonl"),
                sides=sides,
                task=task,
                options=opts,
                out_dir=out.resolve(),
                min_f1=min_f1,
                min_agreement=min_agreement,
                on_start=start,
                on_progress=advance,
            )
    except ValidationError as exc:
        raise typer.BadParameter(f"bad {task} options: {exc}") from exc
    typer.echo(result.markdown_path.read_text())
    typer.echo(f"report: {result.markdown_path}, {result.json_path}")
    if not result.passed:
        raise typer.Exit(1)


@app.command("make-eval-docs")
def make_eval_docs(
    folder: Annotated[Path, typer.Argument(help="Folder to write the documents, labels.jsonl and schema.json into.")],
    count: Annotated[int, typer.Option(min=1, max=10_000, help="How many documents.")] = 12,
    seed: Annotated[int, typer.Option(help="Same seed, same documents.")] = 0,
    min_pages: Annotated[int, typer.Option(min=1, max=500, help="Fewest pages per document.")] = 3,
    max_pages: Annotated[int, typer.Option(min=1, max=500, help="Most pages per document.")] = 6,
) -> None:
    """Write multi-page documents (PDF, DOCX, text) with facts planted on known pages, labelled for vlbatch eval."""
    from vlbatch.evaluation.docset import KINDS, write_document_set

    if min_pages > max_pages:
        raise typer.BadParameter(f"--min-pages {min_pages} is above --max-pages {max_pages}")
    labels = write_document_set(folder, count=count, seed=seed, min_pages=min_pages, max_pages=max_pages)
    typer.echo(f"{count} documents, {labels} and {folder / 'schema.json'}; score them with:")
    typer.echo(f"  vlbatch eval {folder} --model MODEL --task extract --schema {folder / 'schema.json'}")
    typer.echo(f"  vlbatch eval {folder} --model MODEL --task summarize")
    typer.echo(f"  vlbatch eval {folder} --model MODEL --task classify --options '{json.dumps({'labels': KINDS})}'")


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


@app.command()
def energy(job_id: Annotated[str, typer.Argument(help="The job whose energy to show.")]) -> None:
    """A job's energy: Wh, Wh per 1,000 items and, with VLBATCH_PRICE_PER_KWH, its cost."""
    from vlbatch.db import crud
    from vlbatch.db.energy import describe, job_energy
    from vlbatch.db.session import make_engine, make_sessionmaker

    settings: Settings = get_settings()
    with make_sessionmaker(make_engine(settings.database_url))() as s:
        job = crud.get_job(s, job_id=job_id)
        if job is None:
            typer.echo(f"no job {job_id}", err=True)
            raise typer.Exit(1)
        counts = crud.item_counts(s, job_id=job.id)
    done = counts["succeeded"] + counts["failed"]
    typer.echo(f"job {job.id} ({job.pipeline}, {job.status}): {done}/{job.total} items done")
    typer.echo(describe(job_energy(job, items_done=done, price_per_kwh=settings.price_per_kwh), items_done=done))


@app.command()
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
) -> None:
    """Write a tagging job's tags and captions as XMP sidecars (dc:subject, lr:hierarchicalSubject, dc:description)."""
    from pipelines.sidecars import write_job_sidecars
    from vlbatch.db.session import make_engine, make_sessionmaker, migrate

    if naming not in ("ext", "stem"):
        raise typer.BadParameter("--naming is ext or stem")
    settings: Settings = get_settings()
    migrate(settings.database_url)
    with make_sessionmaker(make_engine(settings.database_url))() as session:
        report = write_job_sidecars(
            session,
            job_id=job_id,
            out_dir=out,
            relative_to=relative_to,
            naming="ext" if naming == "ext" else "stem",
            jpeg_copies=jpeg_copies,
            force=force,
        )
    typer.echo(
        f"sidecars written {report.written}, kept (not ours) {report.kept_foreign}, jpeg copies {report.jpeg_copies},"
        f" skipped: failed {report.skipped_failed}, not a local file {report.skipped_not_local}, errors {report.errors}"
    )


jobs_app = typer.Typer(help="Jobs of a running API (VLBATCH_API_URL, key in VLBATCH_API_KEY).", no_args_is_help=True)
app.add_typer(jobs_app, name="jobs")


def _api_client() -> ApiClient:
    from vlbatch.remote import ApiClient

    settings: Settings = get_settings()
    key = settings.api_key.get_secret_value() if settings.api_key is not None else None
    return ApiClient(settings.api_url, key)


@jobs_app.command("list")
def jobs_list(
    limit: Annotated[int, typer.Option(min=1, help="Newest jobs to show.")] = 20,
    status: Annotated[str | None, typer.Option(help="Only jobs in this state.")] = None,
) -> None:
    """The newest jobs, one line each: id, status, progress, failures, pipeline, model, items/s."""
    from vlbatch.remote import job_line

    for job in _api_client().jobs(limit=limit, status=status):
        typer.echo(job_line(job))


@jobs_app.command("show")
def jobs_show(job_id: Annotated[str, typer.Argument(help="The job's id.")]) -> None:
    """One job as the API reports it (JSON)."""
    typer.echo(json.dumps(_api_client().job(job_id), indent=2))


@jobs_app.command("watch")
def jobs_watch(
    job_id: Annotated[str, typer.Argument(help="The job's id.")],
    interval: Annotated[float, typer.Option(min=0.1, help="Seconds between polls.")] = 2.0,
) -> None:
    """A progress bar with items/s and ETA until the job has ended; exit code 0 when it finished, else 1."""
    from vlbatch.remote import watch_job

    job = watch_job(_api_client(), job_id, interval_s=interval)
    typer.echo(f"{job_id}: {job['status']}")
    raise typer.Exit(0 if job["status"] == "finished" else 1)


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
    from engine.planning.command import parse_ids, run_plan
    from engine.planning.planner import PlanError

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


@app.command()
def quantize(
    model: Annotated[Path, typer.Argument(help="Float Hugging Face model directory (safetensors).")],
    out: Annotated[Path, typer.Argument(help="New directory for the W8A8 checkpoint vllm-ascend loads on 310P.")],
    cpu_out: Annotated[
        Path | None, typer.Option(help="Also write a compressed-tensors INT8 copy for vLLM CPU/GPU here.")
    ] = None,
    prompt: Annotated[list[str] | None, typer.Option(help="Calibration prompt (repeatable).")] = None,
    image: Annotated[list[Path] | None, typer.Option(help="Calibration image (repeatable; vision models).")] = None,
    keep_float: Annotated[
        list[str] | None, typer.Option(help="Regex of linear layers to keep float, added to vision/lm_head.")
    ] = None,
    smooth_alpha: Annotated[float | None, typer.Option(help="SmoothQuant migration strength (0-1).")] = None,
    cpu_activations: Annotated[str, typer.Option(help="static (as on 310P) or dynamic per-token.")] = "static",
) -> None:
    """Quantize MODEL to W8A8 (vision tower, embeddings, lm_head and norms stay fp16) on this CPU."""
    from kernels.errors import QuantizeError
    from kernels.quantize import DEFAULT_PROMPTS, QuantizeOptions, quantize_model

    try:
        opts = QuantizeOptions(
            prompts=tuple(prompt) if prompt else DEFAULT_PROMPTS,
            images=tuple(image or ()),
            extra_keep_float=tuple(keep_float or ()),
            smooth_alpha=smooth_alpha,
            cpu_activations=cpu_activations,  # type: ignore[arg-type]  # checked by QuantizeOptions
        )
        with _progress("step") as (start, advance):  # calibration samples, then layers
            report = quantize_model(model, out, cpu_out=cpu_out, options=opts, on_start=start, on_progress=advance)
    except QuantizeError as e:
        typer.echo(f"vlbatch quantize: {e}", err=True)
        raise typer.Exit(2) from None
    typer.echo(report.format())


templates_app = typer.Typer(help="Recurring document jobs: an inbox folder on a cron schedule.", no_args_is_help=True)
app.add_typer(templates_app, name="templates")


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


@templates_app.command("add")
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
    from worker.templates import TemplateError, create_template, next_run_at

    opts = _template_options(task, options, schema, labels)
    settings = get_settings()
    with open_sessions(settings)() as s:
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
                allowed_roots=settings.allowed_input_roots,
                tenant=tenant,
            )
        except TemplateError as exc:
            raise typer.BadParameter(str(exc)) from exc
        s.commit()
    typer.echo(f"template {t.name}: {t.pipeline} over {t.inbox}; next run {next_run_at(t.cron, after=t.created_at)}")


@templates_app.command("list")
def templates_list() -> None:
    """Show every template with its schedule, last and next run."""
    from vlbatch.db.templates import list_templates
    from worker.nightly import open_sessions
    from worker.templates import next_run_at

    with open_sessions(get_settings())() as s:
        for t in list_templates(s):
            nxt = next_run_at(t.cron, after=t.last_run_at or t.created_at) if t.enabled else "disabled"
            typer.echo(f"{t.name}\t{t.pipeline}\t{t.model}\t{t.cron!r}\tlast {t.last_run_at}\tnext {nxt}\t{t.inbox}")


@templates_app.command("run")
def templates_run(name: Annotated[str, typer.Argument(help="Template to run now, whatever its schedule.")]) -> None:
    """Queue NAME's new and changed documents now; print the job id and the file counts."""
    from worker.nightly import open_sessions, run_template
    from worker.templates import TemplateError

    settings = get_settings()
    try:
        r = run_template(settings, open_sessions(settings), name)
    except TemplateError as exc:
        raise typer.BadParameter(str(exc)) from exc
    if r.skipped:
        raise typer.BadParameter(f"another run of {name!r} claimed it first; nothing queued")
    note = "" if r.published or not r.job_id else " (broker unreachable: the reconciler will send it)"
    typer.echo(f"job {r.job_id or '-'}{note}: {r.new} new, {r.changed} changed, {r.unchanged} unchanged")


@templates_app.command("scheduler")
def templates_scheduler() -> None:
    """Run the scheduler (Celery beat + a solo worker on vlbatch.control). Run exactly one per cluster."""
    from worker.nightly import main as scheduler_main

    scheduler_main()


keys_app = typer.Typer(help="API keys: each acts for one tenant; admin keys see every tenant.", no_args_is_help=True)
app.add_typer(keys_app, name="keys")


@keys_app.command("create")
def keys_create(
    tenant: Annotated[str, typer.Option(help="The tenant the key acts for (its jobs, templates and files).")],
    admin: Annotated[bool, typer.Option("--admin", help="The key sees and acts on every tenant's rows.")] = False,
    name: Annotated[str | None, typer.Option(help="A label shown by `vlbatch keys list`.")] = None,
) -> None:
    """Make a key and print it once: only its hash is stored, so it cannot be shown again."""
    from vlbatch.db.keys import create_key
    from vlbatch.db.session import make_engine, make_sessionmaker, migrate

    settings: Settings = get_settings()
    migrate(settings.database_url)
    with make_sessionmaker(make_engine(settings.database_url))() as s:
        made = create_key(s, tenant=tenant, is_admin=admin, name=name)
        s.commit()
    typer.echo(made.secret)
    role = "admin" if admin else "tenant"
    typer.echo(f"key {made.row.id} ({role} key of tenant '{tenant}'); store it now, it is not shown again", err=True)


@keys_app.command("list")
def keys_list() -> None:
    """Every key: id, tenant, role, name, its first characters, created, revoked. No secrets."""
    from vlbatch.db.keys import list_keys
    from vlbatch.db.session import make_engine, make_sessionmaker, migrate

    settings: Settings = get_settings()
    migrate(settings.database_url)
    with make_sessionmaker(make_engine(settings.database_url))() as s:
        for k in list_keys(s):
            revoked = f"revoked {k.revoked_at:%Y-%m-%d %H:%M}" if k.revoked_at else "live"
            role = "admin" if k.is_admin else "tenant"
            fields = (k.id, k.tenant, role, k.name or "-", f"{k.prefix}...", f"{k.created_at:%Y-%m-%d %H:%M}", revoked)
            typer.echo("\t".join(map(str, fields)))


@keys_app.command("revoke")
def keys_revoke(key_id: Annotated[int, typer.Argument(help="The key's id (`vlbatch keys list`).")]) -> None:
    """Revoke a key: requests with it get 401 from now on."""
    from vlbatch.db.keys import revoke_key
    from vlbatch.db.session import make_engine, make_sessionmaker, migrate
    from vlbatch.errors import KEY_NOT_FOUND, VlbatchError

    settings: Settings = get_settings()
    migrate(settings.database_url)
    with make_sessionmaker(make_engine(settings.database_url))() as s:
        if not revoke_key(s, key_id=key_id):
            raise VlbatchError(f"no API key has id {key_id} (see `vlbatch keys list`)", code=KEY_NOT_FOUND)
        s.commit()
    typer.echo(f"key {key_id} revoked")


@app.command()
def bench(
    model: Annotated[
        str, typer.Option(help="tiny, reference (generated random weights) or a model directory.")
    ] = "tiny",
    photos: Annotated[int, typer.Option(min=1, max=100_000, help="Timed photos (warm-up photos come on top).")] = 200,
    size: Annotated[str, typer.Option(help="Photo size, WxH.")] = "1600x1200",
    max_visual_tokens: Annotated[int, typer.Option(min=4, help="Visual-token budget per image.")] = 256,
    max_num_seqs: Annotated[int, typer.Option(min=1, help="Concurrent sequences in the engine.")] = 64,
    chunk_size: Annotated[int, typer.Option(min=1, help="Items per chunk (embedded and service arms).")] = 32,
    images_per_prompt: Annotated[int, typer.Option(min=1, help="Photos per item.")] = 1,
    arms: Annotated[
        str | None, typer.Option(help="Comma-separated arms, default all: raw,embedded,service,serve_c1,serve_c32.")
    ] = None,
    warmup: Annotated[int, typer.Option(min=0, help="Untimed warm-up items each arm runs first.")] = 4,
    workdir: Annotated[Path, typer.Option(help="Where the model and photos go (reused by later runs).")] = Path(
        "vlbatch-bench"
    ),
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the figures as JSON here.")] = None,
    plot: Annotated[Path | None, typer.Option(help="Write a PNG of throughput and occupancy over time here.")] = None,
    sweep: Annotated[
        str | None,
        typer.Option(
            help="PARAM=V1,V2,... with PARAM chunk_size, max_num_seqs, max_visual_tokens or images_per_prompt."
        ),
    ] = None,
    engine: Annotated[str | None, typer.Option(help="Further engine arguments as JSON (EngineConfig fields).")] = None,
    rounds: Annotated[
        int, typer.Option(min=1, max=20, help="Run the arms this many times, interleaved; report each arm's median.")
    ] = 1,
    pg_admin_url: str = "postgresql://127.0.0.1:5432/test",
    redis_url: str = "redis://127.0.0.1:6379/14",
) -> None:
    """Items/s of raw LLM.generate, embedded tag, the service path and vllm serve on the same inputs, in one run."""
    from vlbatch.bench.arms import UnknownArm, parse_arms, select_arms
    from vlbatch.bench.report import print_report, write_json, write_plot
    from vlbatch.bench.rounds import format_rounds, median_results, rounds_json
    from vlbatch.bench.run import run_bench
    from vlbatch.bench.spec import DEFAULT_ENGINE, BenchSpec
    from vlbatch.bench.sweep import SweepError, parse_sweep, run_sweep, sweep_json

    try:
        w, h = (int(v) for v in size.lower().split("x"))
    except ValueError:
        raise typer.BadParameter(f"--size must be WxH, e.g. 1600x1200, not {size!r}") from None
    try:
        names = parse_arms(arms)
        swept = parse_sweep(sweep) if sweep else None
    except (UnknownArm, SweepError) as exc:
        raise typer.BadParameter(str(exc)) from exc
    try:
        extra = json.loads(engine) if engine else {}
    except json.JSONDecodeError as exc:
        raise typer.BadParameter(f"--engine is not JSON: {exc}") from exc
    if not isinstance(extra, dict):
        raise typer.BadParameter("--engine must be a JSON object")
    try:
        spec = BenchSpec(
            model=model,
            n_photos=photos,
            photo_size=(w, h),
            max_visual_tokens=max_visual_tokens,
            images_per_prompt=images_per_prompt,
            engine={**DEFAULT_ENGINE, **extra, "max_num_seqs": max_num_seqs},
            chunk_size=chunk_size,
            arms=names,
            pg_admin_url=pg_admin_url,
            redis_url=redis_url,
            warmup_items=warmup,
            work_dir=workdir.resolve(),
        )
    except ValidationError as exc:
        raise typer.BadParameter(str(exc)) from exc
    if swept is not None:
        param, values = swept
        sweep_arms = select_arms(names)
        with _progress("arm") as (start, advance):  # an arm at one value, engine load included
            start(len(values) * len(sweep_arms))
            points = run_sweep(spec, param, values, sweep_arms, on_result=lambda _: advance(1))
        if json_path:
            json_path.parent.mkdir(parents=True, exist_ok=True)
            json_path.write_text(json.dumps(sweep_json(param, points, spec), indent=2))
        failed = any(p.result.error for pts in points.values() for p in pts)
        raise typer.Exit(1 if failed else 0)
    chosen = select_arms(names)
    with _progress("arm") as (start, advance):  # an arm's run, engine load included
        start(len(chosen) * rounds)
        every = run_bench(spec, chosen, rounds=rounds, on_result=lambda _: advance(1))
    results = median_results(every)
    print_report(results)
    if rounds > 1:
        typer.echo("\n" + format_rounds(every, rounds))
    if json_path:
        extra_json = rounds_json(every, rounds) if rounds > 1 else None
        typer.echo(f"figures -> {write_json(json_path, results, spec, extra=extra_json)}")
    if plot:
        try:
            typer.echo(f"plot -> {write_plot(plot, results)}")
        except RuntimeError as exc:
            typer.echo(f"vlbatch bench: {exc}", err=True)
            raise typer.Exit(1) from None
    if any(r.error for r in every):
        raise typer.Exit(1)


def main() -> None:
    from vlbatch.errors import VlbatchError

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        app()
    except VlbatchError as exc:  # a refusal with its code, not a traceback (``vlbatch.errors`` lists the codes)
        typer.echo(f"error {exc.code}: {exc.message}", err=True)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()

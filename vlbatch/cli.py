"""The ``vlbatch`` command line."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from pydantic import ValidationError

from vlbatch.settings import Settings, get_settings

# Command bodies import what they run, so `import vlbatch.cli` (every command, `--help`) stays cheap and
# loads neither the pipelines nor the engine.
if TYPE_CHECKING:
    from pipelines.image_tagging import TaggingOptions
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
    """Run an embedded job with a progress bar that starts once the engine is loaded."""
    from tqdm import tqdm

    bar: tqdm[None] | None = None

    def start(total: int) -> None:
        nonlocal bar
        bar = tqdm(total=total, unit=unit)

    try:
        return run(start, lambda n: bar.update(n) if bar else None)
    finally:
        if bar is not None:
            bar.close()


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
    out: Annotated[Path, typer.Option(help="Results file (.jsonl or .csv).")] = Path("vlbatch-out/results.jsonl"),
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
    from tqdm import tqdm

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
    bar: tqdm[None] | None = None

    def start(total: int) -> None:
        nonlocal bar
        bar = tqdm(total=total, unit="request")

    try:
        done = run(
            settings,
            source=input_file,
            out=output_file,
            model_dir=model_dir,
            options=opts,
            on_start=start,
            on_progress=lambda n: bar.update(n) if bar else None,
        )
    finally:
        if bar is not None:
            bar.close()
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
    out: Annotated[Path, typer.Option(help="Results file (.jsonl or .csv).")] = Path("vlbatch-out/documents.jsonl"),
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
    """Make a tiny random-weight model and sample photos, then tag them with the real engine, end to end."""
    from engine.tiny_model import write_tiny_qwen2_vl
    from pipelines.image_tagging import TaggingOptions
    from vlbatch.demo import write_sample_photos

    workdir = workdir.resolve()
    model_dir = workdir / "tiny-qwen2-vl"
    if not (model_dir / "config.json").is_file():
        typer.echo(f"writing a tiny random-weight Qwen2-VL to {model_dir}")
        write_tiny_qwen2_vl(model_dir)
    album = workdir / "photos"
    write_sample_photos(album, count=photos)
    settings = get_settings().model_copy(
        update={"database_url": f"sqlite:///{workdir / 'vlbatch.db'}", "model_name": "tiny-qwen2-vl"}
    )
    # Small, CPU-friendly defaults; a fixed KV size avoids sizing the cache as a fraction of RAM.
    defaults = {"dtype": "float32", "max_model_len": 2048, "kv_cache_memory_bytes": 256 << 20, "enforce_eager": True}
    settings = _engine_args(settings.model_copy(update={"engine": {**defaults, **settings.engine}}), engine)
    opts = TaggingOptions(max_tags=5, caption=True, max_caption_chars=60, max_visual_tokens=64)
    out = workdir / "results.jsonl"
    run = _run_tagging(settings, album, model_dir, opts, out)
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
    typer.echo(
        "The model's weights are random, so these tags and captions are meaningless; the pipeline around them "
        "is the real one. Point `vlbatch tag DIR --model /path/to/Qwen2.5-VL-3B-Instruct` at real weights."
    )


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
    report = reconcile_once(
        settings,
        make_sessionmaker(make_engine(settings.database_url)),
        stale_after=timedelta(seconds=settings.unclaimed_resend_s),
    )
    typer.echo(f"re-enqueued {report.sent} chunks" + (" (broker unreachable)" if report.broker_down else ""))
    for model, n in sorted(report.waiting.items()):
        typer.echo(f"{n} chunks for model {model!r} were sent several times and never claimed: is a worker up?")


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
        report = quantize_model(model, out, cpu_out=cpu_out, options=opts)
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
        points = run_sweep(spec, param, values, select_arms(names))
        if json_path:
            json_path.parent.mkdir(parents=True, exist_ok=True)
            json_path.write_text(json.dumps(sweep_json(param, points, spec), indent=2))
        failed = any(p.result.error for pts in points.values() for p in pts)
        raise typer.Exit(1 if failed else 0)
    every = run_bench(spec, select_arms(names), rounds=rounds)
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

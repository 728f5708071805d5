"""Commands that run a job in this process (SQLite, no broker): ``tag``, ``run-batch``, ``docs`` and ``demo``.

The engine starts with the arguments the worker's would (``engine.planning.host_fit``): the model's own context, and
on a CPU host a KV cache sized from the model, never as vLLM's fraction of the host's RAM.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from pydantic import ValidationError

from cli.engine_option import ENGINE_HELP, engine_args, engine_for_model
from cli.progress import LOADING, progress, run_embedded
from vlbatch.settings import Settings, get_settings

if TYPE_CHECKING:
    from pipelines.image_tagging import TaggingOptions
    from worker.embedded import EmbeddedRun


DRY_RUN_HELP = "Load no engine and store nothing: print the items, tokens, engine time, Wh and cost."
CARD_HELP = (
    "For --dry-run with no measured rate yet: the card to plan for (engine/device_specs.json); on a CPU host"
    " cpu-host (this host, measured) unless given."
)


def _dry_run(
    directory: Path, model: Path, pipeline: str, options: dict[str, object], *, card: str | None, cards: int
) -> None:
    """Print the estimate of a run over DIRECTORY, against the rates this database recorded."""
    from cli.estimates import estimate_dict, print_estimate
    from worker.estimates import estimate_directory

    e = estimate_directory(
        get_settings(), directory=directory, model_dir=model, pipeline=pipeline, options=options, card=card, cards=cards
    )
    print_estimate(estimate_dict(e))


def run_tagging(settings: Settings, directory: Path, model: Path, opts: TaggingOptions, out: Path) -> EmbeddedRun:
    """Tag DIRECTORY in this process behind a progress bar: the body of ``tag`` and of ``demo``."""
    from worker.embedded import tag_directory

    return run_embedded(
        lambda start, advance: tag_directory(
            settings, directory=directory, model_dir=model, opts=opts, out=out, on_start=start, on_progress=advance
        ),
        unit="item",
    )


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
    dry_run: Annotated[bool, typer.Option("--dry-run", help=DRY_RUN_HELP)] = False,
    card: Annotated[str | None, typer.Option(help=CARD_HELP)] = None,
    cards: Annotated[int, typer.Option(min=1, help="Cards of --card the run would have.")] = 1,
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
    if dry_run:
        _dry_run(directory, model, "image_tagging", opts.model_dump(), card=card, cards=cards)
        return
    run = run_tagging(engine_for_model(engine_args(get_settings(), engine), model), directory, model, opts, out)
    c = run.counts
    typer.echo(f"job {run.job_id}: {c['succeeded']} succeeded, {c['failed']} failed; {run.rows_written} rows -> {out}")


def run_batch(
    input_file: Annotated[
        str, typer.Option("-i", "--input-file", help="Batch JSONL: a path, or a URL the settings allow.")
    ],
    output_file: Annotated[Path, typer.Option("-o", "--output-file", help="Where the answers go (JSONL).")],
    model: Annotated[Path | None, typer.Option(help="Model directory; VLBATCH_MODEL_PATH when omitted.")] = None,
    max_visual_tokens: int = 1024,
    images_per_prompt: int = 4,
    engine: Annotated[str | None, typer.Option(help=ENGINE_HELP)] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help=DRY_RUN_HELP)] = False,
    card: Annotated[str | None, typer.Option(help=CARD_HELP)] = None,
    cards: Annotated[int, typer.Option(min=1, help="Cards of --card the run would have.")] = 1,
) -> None:
    """Answer an OpenAI/vLLM batch file in this process (vLLM run-batch's format; SQLite, no broker)."""
    from pipelines.chat import RequestOptions
    from worker.run_batch import run_batch as run

    settings = engine_args(get_settings(), engine)
    model_dir = model or (Path(settings.model.model_path) if settings.model.model_path else None)
    if model_dir is None or not model_dir.is_dir():
        raise typer.BadParameter("give --model DIR (or VLBATCH_MODEL_PATH) naming a model directory")
    try:
        opts = RequestOptions(max_visual_tokens=max_visual_tokens, images_per_prompt=images_per_prompt)
    except ValidationError as exc:
        raise typer.BadParameter(str(exc)) from exc
    if dry_run:
        from cli.estimates import estimate_dict, print_estimate
        from worker.run_batch import estimate_batch

        e = estimate_batch(settings, source=input_file, model_dir=model_dir, options=opts, card=card, cards=cards)
        print_estimate(estimate_dict(e))
        return
    settings = engine_for_model(settings, model_dir)
    with progress("request", waiting=LOADING) as (start, advance):
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
    dry_run: Annotated[bool, typer.Option("--dry-run", help=DRY_RUN_HELP)] = False,
    card: Annotated[str | None, typer.Option(help=CARD_HELP)] = None,
    cards: Annotated[int, typer.Option(min=1, help="Cards of --card the run would have.")] = 1,
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
    if dry_run:
        _dry_run(directory, model, task, opts, card=card, cards=cards)
        return
    settings = engine_for_model(engine_args(get_settings(), engine), model)
    try:
        run = run_embedded(
            lambda start, advance: run_documents(
                settings,
                directory=directory,
                model_dir=model,
                pipeline=task,
                options=opts,
                out=out,
                output_dir=output_dir,
                on_start=start,
                on_progress=advance,
            ),
            unit="document",
        )
    except (ValidationError, ValueError) as exc:
        raise typer.BadParameter(f"bad {task} options: {exc}") from exc
    c = run.counts
    typer.echo(f"job {run.job_id}: {c['succeeded']} succeeded, {c['failed']} failed; {run.rows_written} rows -> {out}")


def demo(
    workdir: Annotated[Path, typer.Option(help="Where the model, photos, database and results go.")] = Path(
        "vlbatch-demo"
    ),
    photos: Annotated[int, typer.Option(min=1, max=10_000, help="How many sample photos to make.")] = 48,
    engine: Annotated[str | None, typer.Option(help=ENGINE_HELP)] = None,
) -> None:
    """Tag generated sample photos with the shipped tiny tagging model and the real engine, end to end."""
    from cli.demo import (
        DEMO_MODEL_DIR,
        DEMO_OPTIONS,
        scene_accuracy,
        train_demo_model,
        vlbatch_command,
        write_sample_photos,
    )
    from cli.evaluation.run import read_results
    from cli.output import work_directory

    workdir = workdir.resolve()
    work_directory(workdir)
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
    settings = engine_args(settings.model_copy(update={"engine": {**defaults, **settings.runtime.engine}}), engine)
    out = workdir / "results.jsonl"
    run = run_tagging(settings, album, model_dir, DEMO_OPTIONS, out)
    rows = read_results(out)
    for row in [r for r in rows if r["status"] == "succeeded"][:5] + [r for r in rows if r["status"] == "failed"][:2]:
        name = Path(row["ref"] or "?").name
        if row["status"] == "succeeded":
            typer.echo(f"  {name:<22} tags={row.get('tags')} caption={(row['output'] or {}).get('caption')!r}")
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
        f"one. Point `{vlbatch_command()} tag DIR --model /path/to/Qwen2.5-VL-3B-Instruct` at real weights."
    )

"""``vlbatch eval`` (answer quality on a labelled set, or agreement of two deployments) and ``make-eval-docs``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, cast

import typer
from pydantic import ValidationError

from cli.engine_option import ENGINE_HELP, engine_args, engine_for_model
from cli.progress import LOADING, progress
from vlbatch.settings import get_settings


def eval_(
    folder: Annotated[Path, typer.Argument(help="Folder of the labelled files.", exists=True, file_okay=False)],
    labels: Annotated[
        Path | None,
        typer.Option(help="Labels file (JSONL or CSV: path -> tags/label/fields); default FOLDER/labels.jsonl."),
    ] = None,
    labels_from: Annotated[
        str,
        typer.Option(
            help="file: the labels file; xmp: each photo's own keywords (its XMP sidecar, else embedded XMP, else "
            "IPTC), vlbatch's marked keywords left out."
        ),
    ] = "file",
    synonyms: Annotated[
        Path | None,
        typer.Option(
            help="With --labels-from xmp: the library's words mapped to the model's (JSON object, or lines "
            "'library word = model word'; nothing after '=': not scored).",
            exists=True,
            dir_okay=False,
        ),
    ] = None,
    hierarchy: Annotated[
        str,
        typer.Option(
            help="With --labels-from xmp: a hierarchical keyword counts as its leaf, all its levels, or its path."
        ),
    ] = "leaf",
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
    """Score answers against a labelled set (P/R/F1 per tag, accuracy, exact-match) or the library's own keywords
    (--labels-from xmp); --compare gates two deployments."""
    from cli.evaluation.labels import read_labels
    from cli.evaluation.library import library_labels, read_synonyms
    from cli.evaluation.run import Side, evaluate
    from preprocessing.keywords import Hierarchy

    if (model is None) == (compare is None):
        raise typer.BadParameter("give either --model DIR or --compare A B")
    if labels_from not in ("file", "xmp"):
        raise typer.BadParameter("--labels-from is file or xmp")
    if labels_from == "xmp" and (labels is not None or task != "tag"):
        raise typer.BadParameter("--labels-from xmp scores tags (--task tag) against the photos' keywords, no --labels")
    if labels_from == "file" and (synonyms is not None or hierarchy != "leaf"):
        raise typer.BadParameter("--synonyms and --hierarchy go with --labels-from xmp")
    if hierarchy not in ("leaf", "levels", "path"):
        raise typer.BadParameter("--hierarchy is leaf, levels or path")
    try:
        opts = json.loads(options) if options else {}
        if schema is not None:
            opts["json_schema"] = json.loads(schema.read_text())
    except json.JSONDecodeError as exc:
        raise typer.BadParameter(f"not JSON: {exc}") from exc
    settings = engine_args(get_settings(), engine)
    from_library = (
        library_labels(
            folder,
            hierarchy=cast(Hierarchy, hierarchy),  # checked above
            mark=settings.xmp.xmp_keyword_root,
            synonyms=read_synonyms(synonyms) if synonyms is not None else None,
        )
        if labels_from == "xmp"
        else None
    )
    if from_library is not None and not from_library.labels:
        raise typer.BadParameter(f"no photo under {folder} has keywords of its own (sidecar, embedded XMP or IPTC)")
    if compare is not None:
        sides = [
            Side("a", compare[0], engine_for_model(engine_args(settings, engine_a), compare[0]).runtime.engine),
            Side("b", compare[1], engine_for_model(engine_args(settings, engine_b), compare[1]).runtime.engine),
        ]
    else:
        assert model is not None
        sides = [Side("run", model, engine_for_model(settings, model).runtime.engine)]
    try:
        with progress("item", waiting=LOADING) as (start, advance):  # a bar per side that runs a job
            result = evaluate(
                settings,
                folder=folder.resolve(),
                labels=from_library.labels if from_library else read_labels(labels or folder / "labels.jsonl"),
                sides=sides,
                task=task,
                options=opts,
                out_dir=out.resolve(),
                min_f1=min_f1,
                min_agreement=min_agreement,
                on_start=start,
                on_progress=advance,
                from_library=from_library,
            )
    except ValidationError as exc:
        raise typer.BadParameter(f"bad {task} options: {exc}") from exc
    typer.echo(result.markdown_path.read_text())
    typer.echo(f"report: {result.markdown_path}, {result.json_path}")
    if not result.passed:
        raise typer.Exit(1)


def make_eval_docs(
    folder: Annotated[Path, typer.Argument(help="Folder to write the documents, labels.jsonl and schema.json into.")],
    count: Annotated[int, typer.Option(min=1, max=10_000, help="How many documents.")] = 12,
    seed: Annotated[int, typer.Option(help="Same seed, same documents.")] = 0,
    min_pages: Annotated[int, typer.Option(min=1, max=500, help="Fewest pages per document.")] = 3,
    max_pages: Annotated[int, typer.Option(min=1, max=500, help="Most pages per document.")] = 6,
) -> None:
    """Write multi-page documents (PDF, DOCX, text) with facts planted on known pages, labelled for vlbatch eval."""
    from cli.evaluation.docset import KINDS, write_document_set

    if min_pages > max_pages:
        raise typer.BadParameter(f"--min-pages {min_pages} is above --max-pages {max_pages}")
    labels = write_document_set(folder, count=count, seed=seed, min_pages=min_pages, max_pages=max_pages)
    typer.echo(f"{count} documents, {labels} and {folder / 'schema.json'}; score them with:")
    typer.echo(f"  vlbatch eval {folder} --model MODEL --task extract --schema {folder / 'schema.json'}")
    typer.echo(f"  vlbatch eval {folder} --model MODEL --task summarize")
    typer.echo(f"  vlbatch eval {folder} --model MODEL --task classify --options '{json.dumps({'labels': KINDS})}'")

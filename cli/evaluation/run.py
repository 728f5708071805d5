"""Send a labelled set through the normal embedded job path (SQL, feeder, engine, export) and score it.

A side of a comparison is a model directory (run here, with its own engine arguments; or on the engine lent to
this process when it serves that directory: ``worker.lent_engine``) or a results export from another host
(``.jsonl`` or ``.csv`` as ``vlbatch tag`` / ``vlbatch documents`` write it).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cli.evaluation import library, metrics, report
from cli.evaluation.labels import Expected
from jobs.exports.csv_writer import tags_of_cell
from pipelines import image_tagging
from vlbatch.settings import Settings
from worker.embedded import run_documents, tag_directory

RESULT_SUFFIXES = (".jsonl", ".csv")


@dataclass(frozen=True)
class Side:
    name: str
    target: Path  # model directory or results file
    engine: dict[str, Any]


@dataclass(frozen=True)
class EvalResult:
    scores: list[metrics.Scores]
    comparison: metrics.Comparison | None
    failures: list[str]
    json_path: Path
    markdown_path: Path

    @property
    def passed(self) -> bool:
        return not self.failures


def read_results(path: Path) -> list[dict[str, Any]]:
    """Rows of a results export (the API's columns, as ``vlbatch tag --out`` writes them too), each with its
    ``output`` decoded and its ``tags`` as plain names; a row without tags has no ``tags`` key (an answer that is
    not a tag list). Exports of earlier versions (tags as names, CSV cells of JSON) read the same."""
    if path.suffix == ".csv":
        with path.open(newline="") as fh:
            return [_scored_row(dict(raw)) for raw in csv.DictReader(fh)]
    return [_scored_row(json.loads(line)) for line in path.read_text().splitlines() if line.strip()]


def _scored_row(row: dict[str, Any]) -> dict[str, Any]:
    tags = row.pop("tags", None)
    if isinstance(tags, str):  # CSV: names joined by ';' (an earlier export's cell: a JSON list)
        tags = json.loads(tags) if tags.startswith("[") else tags_of_cell(tags) or None
    if isinstance(tags, list):
        row["tags"] = [t["tag"] if isinstance(t, dict) else t for t in tags]
    for key in ("output", "images"):
        if isinstance(row.get(key), str):
            row[key] = json.loads(row[key]) if row[key] else None
    return row


def run_side(
    settings: Settings,
    side: Side,
    *,
    folder: Path,
    task: str,
    options: dict[str, Any],
    workdir: Path,
    on_start: Callable[[int], None] | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> list[dict[str, Any]]:
    """The result rows of one side: read from its export, or made by running the job here (``on_start`` and
    ``on_progress`` as ``worker.embedded`` calls them: items to do once the engine is loaded, items done)."""
    if side.target.is_file():
        return read_results(side.target)
    workdir.mkdir(parents=True, exist_ok=True)
    run_settings = settings.model_copy(
        update={
            "database_url": f"sqlite:///{workdir / f'{side.name}.db'}",
            "engine": {**settings.runtime.engine, **side.engine},
        }
    )
    out = workdir / f"{side.name}.jsonl"
    if task == "tag":
        opts = image_tagging.TaggingOptions.model_validate(options)
        tag_directory(
            run_settings,
            directory=folder,
            model_dir=side.target,
            opts=opts,
            out=out,
            on_start=on_start,
            on_progress=on_progress,
        )
    else:
        run_documents(
            run_settings,
            directory=folder,
            model_dir=side.target,
            pipeline=task,
            options=options,
            out=out,
            on_start=on_start,
            on_progress=on_progress,
        )
    return read_results(out)


def evaluate(
    settings: Settings,
    *,
    folder: Path,
    labels: list[Expected],
    sides: list[Side],
    task: str,
    options: dict[str, Any],
    out_dir: Path,
    min_f1: float | None = None,
    min_agreement: float | None = None,
    on_start: Callable[[int], None] | None = None,
    on_progress: Callable[[int], None] | None = None,
    from_library: library.LibraryLabels | None = None,
) -> EvalResult:
    """Score one side, or two and their agreement; writes ``eval.json`` and ``eval.md`` to ``out_dir``.
    ``on_start``/``on_progress`` follow each side's job (``on_start`` again for the second). With
    ``from_library`` (the labels are the library's own keywords), the report adds the tags the model never gives
    and the photos it disagrees with most, with thumbnails."""
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = [
        run_side(
            settings,
            s,
            folder=folder,
            task=task,
            options=options,
            workdir=out_dir,
            on_start=on_start,
            on_progress=on_progress,
        )
        for s in sides
    ]
    scores = [metrics.score(labels, r, task=task) for r in rows]
    if task == "tag":
        tagging = image_tagging.TaggingOptions.model_validate(options)
        for s, r in zip(scores, rows, strict=True):
            metrics.language_share(s, r, tagging)
    comparison = metrics.compare(labels, rows[0], rows[1]) if len(rows) == 2 else None
    failures = metrics.gate(scores, comparison, min_f1=min_f1, min_agreement=min_agreement)
    names = [f"{'AB'[i] if len(sides) == 2 else 'run'}: {s.target}" for i, s in enumerate(sides)]
    libraries = (
        [_library_figures(from_library, s, r) for s, r in zip(scores, rows, strict=True)] if from_library else []
    )
    thumbnails = library.write_thumbnails(
        list(dict.fromkeys(d["path"] for lib in libraries for d in lib["disagreements"])),  # in the report's order
        folder=folder,
        out_dir=out_dir,
        max_bytes=settings.limits.max_input_bytes,
    )
    doc = {
        "task": task,
        "options": options,
        "sides": [{"name": n, "target": str(s.target), "engine": s.engine} for n, s in zip(names, sides, strict=True)],
        "scores": [s.as_dict() for s in scores],
        "comparison": comparison.as_dict() if comparison else None,
        "library": libraries or None,
        "thresholds": {"min_f1": min_f1, "min_agreement": min_agreement},
        "failures": failures,
        "passed": not failures,
    }
    json_path, md_path = out_dir / "eval.json", out_dir / "eval.md"
    json_path.write_text(json.dumps(doc, indent=2, ensure_ascii=False))
    md_path.write_text(report.markdown(names, scores, comparison, failures, libraries=libraries, thumbnails=thumbnails))
    return EvalResult(scores, comparison, failures, json_path, md_path)


def _library_figures(
    labels: library.LibraryLabels, scores: metrics.Scores, rows: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "photos": len(labels.labels),
        "unlabelled": len(labels.unlabelled),
        "unmapped": labels.unmapped,
        "never_given": library.never_given(scores),
        "disagreements": library.disagreements(labels.labels, rows),
    }

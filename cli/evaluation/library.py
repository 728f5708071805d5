"""``vlbatch eval --labels-from xmp``: the photo library's own keywords as the truth.

Each photo's human keywords (``preprocessing.keywords.human_keywords``: its sidecar, else its embedded XMP, else its
IPTC Keywords; vlbatch's own marked keywords left out) are its expected tags. A synonyms file maps the library's
words to the model's (a library says ``automobile``, the model ``car``); a word mapped to nothing is not scored
(a person's name, an event: nothing a picture shows). A photo without keywords is not scored and is counted.

Beside the usual figures the report names the library tags the model never gives and the photos where the model
and the library disagree most, with a thumbnail of each.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cli.evaluation.labels import Expected, LabelsError
from cli.evaluation.metrics import Row, Scores, predicted_tags, rows_by_path
from pipelines.image_tagging import normalise_tag
from preprocessing.input_errors import InputError
from preprocessing.keywords import Hierarchy, human_keywords
from preprocessing.thumbnails import thumbnail_jpeg
from vlbatch.inputs import iter_images

__all__ = ["LibraryLabels", "disagreements", "library_labels", "never_given", "read_synonyms", "write_thumbnails"]

Synonyms = Mapping[str, tuple[str, ...]]
THUMBNAIL_SIZE = 160


@dataclass(frozen=True)
class LibraryLabels:
    labels: list[Expected]  # the photos with at least one keyword to score
    unlabelled: list[Path] = field(default_factory=list)  # photos without one: not scored
    unmapped: int = 0  # keywords the synonyms file maps to nothing


def read_synonyms(path: Path) -> dict[str, tuple[str, ...]]:
    """A synonyms file: a JSON object (``{"automobile": "car", "Grandma": null, "auto": ["car", "vehicle"]}``) or
    lines ``library word = model word`` (``#`` starts a comment; nothing after ``=`` maps the word to nothing)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise LabelsError(f"cannot read synonyms file {path}: {exc}") from exc
    pairs: list[tuple[str, Any]] = []
    if path.suffix.lower() == ".json":
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise LabelsError(f"{path}: not JSON: {exc}") from exc
        if not isinstance(raw, dict):
            raise LabelsError(f"{path}: a JSON synonyms file is one object, library word -> model word(s)")
        pairs = list(raw.items())
    else:
        for n, line in enumerate(text.splitlines(), start=1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            if "=" not in line:
                raise LabelsError(f"{path}:{n}: a synonym line is 'library word = model word'")
            word, _, target = line.partition("=")
            pairs.append((word, target))
    out: dict[str, tuple[str, ...]] = {}
    for word, target in pairs:
        targets = target if isinstance(target, list) else [] if target is None else [target]
        if not all(isinstance(t, str) for t in targets) or not normalise_tag(str(word)):
            raise LabelsError(f"{path}: {word!r} must map to a word, a list of words or nothing")
        out[normalise_tag(str(word))] = tuple(n for n in (normalise_tag(t) for t in targets) if n)
    return out


def library_labels(
    folder: Path, *, hierarchy: Hierarchy = "leaf", mark: str = "AI", synonyms: Synonyms | None = None
) -> LibraryLabels:
    """The expected tags of every image and clip below ``folder`` (what ``vlbatch eval`` sends), from the library."""
    root = folder.resolve()
    labels, unlabelled, unmapped = [], [], 0
    for photo in iter_images(root, recursive=True, roots=[root], videos=True):  # what the run tags
        tags: set[str] = set()
        for keyword in human_keywords(photo, hierarchy=hierarchy, mark=mark):
            word = normalise_tag(keyword)
            mapped = (synonyms or {}).get(word, (word,))
            unmapped += not mapped
            tags.update(t for t in mapped if t)
        if tags:
            labels.append(Expected(path=photo.resolve(), tags=frozenset(tags)))
        else:
            unlabelled.append(photo)
    return LibraryLabels(labels, unlabelled, unmapped)


def never_given(scores: Scores) -> list[dict[str, Any]]:
    """The library's tags the model never gave, the most used first: ``{"tag", "photos"}``."""
    missed = [(t, int(p["fn"])) for t, p in scores.tags_per_tag.items() if not p["tp"] and not p["fp"] and p["fn"]]
    return [{"tag": t, "photos": n} for t, n in sorted(missed, key=lambda x: (-x[1], x[0]))]


def disagreements(labels: Sequence[Expected], rows: Sequence[Row], *, limit: int = 10) -> list[dict[str, Any]]:
    """The photos where the model's tags and the library's overlap least (Jaccard), then differ by the most tags:
    ``{"path", "library", "model", "missed", "extra", "overlap"}``. A failed photo counts as no tags."""
    by_path = rows_by_path(rows)
    ranked: list[tuple[float, int, str, dict[str, Any]]] = []
    for e in labels:
        if e.path not in by_path or e.tags is None:
            continue
        row = by_path[e.path]
        got = (predicted_tags(row) if row.get("status") == "succeeded" else None) or frozenset()
        overlap = len(e.tags & got) / len(e.tags | got)  # the library's tags are never empty here
        if overlap == 1.0:
            continue
        missed, extra = sorted(e.tags - got), sorted(got - e.tags)
        ranked.append(
            (
                overlap,
                -len(missed) - len(extra),
                str(e.path),
                {
                    "path": str(e.path),
                    "library": sorted(e.tags),
                    "model": sorted(got),
                    "missed": missed,
                    "extra": extra,
                    "overlap": overlap,
                },
            )
        )
    return [entry for *_, entry in sorted(ranked, key=lambda r: r[:3])[:limit]]


def write_thumbnails(paths: Sequence[str], *, folder: Path, out_dir: Path, max_bytes: int) -> dict[str, str]:
    """A small JPEG of each photo in ``out_dir/thumbs`` (the worker's decoder reads it, so every format it tags
    shows); returns each path's thumbnail relative to ``out_dir``. A photo that cannot be decoded gets none."""
    made: dict[str, str] = {}
    thumbs = out_dir / "thumbs"
    for n, path in enumerate(paths, start=1):
        try:
            data = thumbnail_jpeg(path, allowed_roots=[folder.resolve()], max_bytes=max_bytes, size=THUMBNAIL_SIZE)
        except (InputError, OSError):
            continue
        thumbs.mkdir(parents=True, exist_ok=True)
        name = f"{n:02d}-{Path(path).stem[:40]}.jpg"
        (thumbs / name).write_bytes(data)
        made[path] = f"thumbs/{name}"
    return made

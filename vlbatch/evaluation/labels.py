"""The labelled set: a labels file (JSONL or CSV) naming each file and what the answer should hold.

JSONL: one object per line, ``{"path": "a.jpg", "tags": [...], "label": "...", "fields": {...}}``
(only ``path`` is required). CSV: a ``path`` column and any of ``tags`` (separated by ``;`` or ``|``),
``label`` and ``fields`` (a JSON object). Paths are relative to the labels file's folder.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipelines.image_tagging import normalise_tag
from vlbatch.errors import BAD_LABELS, VlbatchError


class LabelsError(VlbatchError):
    """The labels file cannot be read or a line is not a label record."""

    code = BAD_LABELS


@dataclass(frozen=True)
class Expected:
    path: Path  # absolute
    tags: frozenset[str] | None = None
    label: str | None = None
    fields: dict[str, Any] = field(default_factory=dict)


def _record(raw: dict[str, Any], base: Path, where: str) -> Expected:
    if not isinstance(raw, dict) or not raw.get("path"):
        raise LabelsError(f"{where}: a label record needs a 'path'")
    tags = raw.get("tags")
    if isinstance(tags, str):
        tags = [t for t in tags.replace("|", ";").split(";")]
    if tags is not None and not isinstance(tags, list):
        raise LabelsError(f"{where}: 'tags' must be a list or a ';'-separated string")
    fields = raw.get("fields") or {}
    if isinstance(fields, str):
        try:
            fields = json.loads(fields)
        except json.JSONDecodeError as exc:
            raise LabelsError(f"{where}: 'fields' is not JSON: {exc}") from exc
    if not isinstance(fields, dict):
        raise LabelsError(f"{where}: 'fields' must be an object")
    label = raw.get("label")
    return Expected(
        path=(base / str(raw["path"])).resolve(),
        tags=frozenset(n for n in (normalise_tag(str(t)) for t in tags) if n) if tags is not None else None,
        label=str(label) if label not in (None, "") else None,
        fields=fields,
    )


def read_labels(path: Path) -> list[Expected]:
    """Every record of a labels file, in file order; raises LabelsError naming the bad line."""
    base = path.resolve().parent
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise LabelsError(f"cannot read labels file {path}: {exc}") from exc
    out: list[Expected] = []
    if path.suffix.lower() == ".csv":
        for n, row in enumerate(csv.DictReader(text.splitlines()), start=2):
            out.append(_record({k: v for k, v in row.items() if v not in (None, "")}, base, f"{path}:{n}"))
    else:
        for n, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                raw = json.loads(line)
            except json.JSONDecodeError as exc:
                raise LabelsError(f"{path}:{n}: not JSON: {exc}") from exc
            out.append(_record(raw, base, f"{path}:{n}"))
    if not out:
        raise LabelsError(f"{path} holds no label records")
    seen: set[Path] = set()
    for e in out:
        if e.path in seen:
            raise LabelsError(f"{path}: {e.path.name} is labelled twice")
        seen.add(e.path)
    return out


def write_labels(path: Path, records: list[Expected]) -> None:
    """A JSONL labels file for ``records`` (paths written relative to the file's folder)."""
    base = path.resolve().parent
    lines = []
    for e in records:
        raw: dict[str, Any] = {"path": str(e.path.relative_to(base))}
        if e.tags is not None:
            raw["tags"] = sorted(e.tags)
        if e.label is not None:
            raw["label"] = e.label
        if e.fields:
            raw["fields"] = e.fields
        lines.append(json.dumps(raw, ensure_ascii=False))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")

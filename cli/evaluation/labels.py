"""The labelled set: a labels file (JSONL or CSV) naming each file and what the answer should hold.

JSONL: one object per line, ``{"path": "a.jpg", "tags": [...], "label": "...", "fields": {...}}``
(only ``path`` is required). CSV: a ``path`` column and any of ``tags`` (separated by ``;`` or ``|``),
``label`` and ``fields`` (a JSON object). Paths are relative to the labels file's folder.

Documents add two keys (JSON objects, in CSV too): ``pages`` names the page (or pages) each field's value
is printed on, ``{"reference": 2}``, against which the extraction's cited pages are scored; ``facts`` names
what a summary should mention, ``{"buyer": "Harbour Logistics", "due_date": ["2025-03-14", "14 March 2025"]}``
(a list gives equivalent spellings: any one counts).
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
    pages: dict[str, tuple[int, ...]] = field(default_factory=dict)  # field -> pages its value is on
    facts: dict[str, tuple[str, ...]] = field(default_factory=dict)  # fact -> spellings a summary may use


def _json_object(value: Any, key: str, where: str) -> dict[str, Any]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise LabelsError(f"{where}: '{key}' is not JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise LabelsError(f"{where}: '{key}' must be an object")
    return value


def _pages(raw: Any, where: str) -> dict[str, tuple[int, ...]]:
    out = {}
    for name, value in _json_object(raw, "pages", where).items():
        pages = value if isinstance(value, list) else [value]
        if not pages or not all(isinstance(p, int) and not isinstance(p, bool) and p >= 1 for p in pages):
            raise LabelsError(f"{where}: pages of {name!r} must be a page number (1-based) or a list of them")
        out[str(name)] = tuple(sorted(set(pages)))
    return out


def _facts(raw: Any, where: str) -> dict[str, tuple[str, ...]]:
    out = {}
    for name, value in _json_object(raw, "facts", where).items():
        spellings = value if isinstance(value, list) else [value]
        if not spellings or not all(isinstance(v, str | int | float) and str(v).strip() for v in spellings):
            raise LabelsError(f"{where}: fact {name!r} must be a non-empty string or a list of them")
        out[str(name)] = tuple(str(v) for v in spellings)
    return out


def _record(raw: dict[str, Any], base: Path, where: str) -> Expected:
    if not isinstance(raw, dict) or not raw.get("path"):
        raise LabelsError(f"{where}: a label record needs a 'path'")
    tags = raw.get("tags")
    if isinstance(tags, str):
        tags = [t for t in tags.replace("|", ";").split(";")]
    if tags is not None and not isinstance(tags, list):
        raise LabelsError(f"{where}: 'tags' must be a list or a ';'-separated string")
    fields = _json_object(raw.get("fields") or {}, "fields", where)
    label = raw.get("label")
    return Expected(
        path=(base / str(raw["path"])).resolve(),
        tags=frozenset(n for n in (normalise_tag(str(t)) for t in tags) if n) if tags is not None else None,
        label=str(label) if label not in (None, "") else None,
        fields=fields,
        pages=_pages(raw.get("pages") or {}, where),
        facts=_facts(raw.get("facts") or {}, where),
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
        if e.pages:
            raw["pages"] = {k: v[0] if len(v) == 1 else list(v) for k, v in e.pages.items()}
        if e.facts:
            raw["facts"] = {k: v[0] if len(v) == 1 else list(v) for k, v in e.facts.items()}
        lines.append(json.dumps(raw, ensure_ascii=False))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")

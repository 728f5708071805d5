"""A document's answer as a JSON file in its job's ``output_dir``: ``{"source": <the document's path>, **answer}``,
indented, written by the worker when the document finishes (before its outcome is stored: from the answer itself,
not a stored record)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

__all__ = ["write_document_json"]


def write_document_json(folder: Path, source: Path, output: dict[str, Any], *, item_id: int) -> None:
    """``<folder>/<file name>.json``, written to a temporary name and renamed so readers never see half.
    Two documents with one file name (from different folders) keep apart by the second's item id."""
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{source.name}.json"
    if target.exists():
        try:
            taken = json.loads(target.read_text()).get("source") != str(source)
        except (OSError, ValueError):
            taken = False
        if taken:
            target = folder / f"{source.name}.{item_id}.json"
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"source": str(source), **output}, ensure_ascii=False, indent=2))
    tmp.replace(target)

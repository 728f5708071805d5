"""The columns of the flat exports (CSV, Parquet): those every job has, then its pipeline's own.

Both are known before the first row is written: a file's header never depends on which item comes first.
"""

from __future__ import annotations

import json
from typing import Any

from pipelines import registry
from pipelines.registry import UnknownPipeline
from vlbatch.db.result_fields import FLAT, ITEM_FIELDS
from vlbatch.db.results import ResultRecord

__all__ = ["FIXED", "FlatColumns"]

# The API's documented CSV columns, in order: the item's fields, the tags and caption, the answer's JSON, then the
# declaration's flat fields (``vlbatch.db.result_fields.FLAT``: tokens and the processed-with marker). Parquet has
# them too, with ``tag_sources`` after ``tags`` and ``raw_text`` after ``output``.
FIXED: tuple[str, ...] = (*ITEM_FIELDS, "tags", "caption", "output", *(f.name for f in FLAT))


class FlatColumns:
    """A pipeline's own columns (``Pipeline.flat_columns``) and how a record fills them, as text: a string as it
    is, anything else (a number, a list) as its JSON."""

    def __init__(self, pipeline: str | None) -> None:
        try:
            self._pipeline = registry.get(pipeline) if pipeline else None
        except UnknownPipeline:  # a job of a pipeline no longer registered: the fixed columns only
            self._pipeline = None
        names = self._pipeline.flat_columns if self._pipeline is not None else ()
        self.names: tuple[str, ...] = tuple(n for n in names if n not in FIXED and n not in ("tag_sources", "raw_text"))

    def values(self, record: ResultRecord) -> list[str | None]:
        if not self.names or self._pipeline is None:
            return []
        flat = self._pipeline.flat_values(record.output)
        return [_text(flat.get(name)) for name in self.names]


def _text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)

"""A job to make, as the jobs service takes it (``jobs.submit``) and the estimate reads it (``jobs.estimate``)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from jobs.item_streams import ItemStream
from vlbatch.db import batches, job_store
from vlbatch.db.models import DEFAULT_TENANT

__all__ = ["JobRequest"]


@dataclass(frozen=True)
class JobRequest:
    """A job to make. ``items`` are the inputs; a batch file gives ``lines`` instead (checked request lines,
    streamed into the job, a bad line stored as an item failed at once) with ``line_count``, the items it will
    make, for the size checks. ``items`` may be an ``ItemStream`` (a folder walked, NDJSON lines): read once while it
    is inserted, its size known only then."""

    pipeline: str
    options: dict[str, Any]
    items: Sequence[job_store.NewItem] | ItemStream = ()
    model: str | None = None  # None (or empty): the served model (VLBATCH_MODEL_PATH), refused when there is none
    priority: str = "batch"
    tenant: str = DEFAULT_TENANT
    output_dir: str | None = None
    idempotency_key: str | None = None
    request_hash: str | None = None  # what the request asked for, kept with its Idempotency-Key
    lines: Iterable[batches.LineItem] | None = None
    line_count: int = 0
    deadline: datetime | None = None  # timezone-aware; claims in its queue go earliest deadline first
    strict_deadline: bool = False  # refuse (deadline_unmeetable) rather than warn when the estimate misses it

    @property
    def size(self) -> int:
        if self.lines is not None:
            return self.line_count
        return self.items.count if isinstance(self.items, ItemStream) else len(self.items)

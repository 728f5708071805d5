"""OpenAI batch output: the lines of a batch's job, one per input line in its order, each an answered request
(the output file) or a failed or unrun one (the error file), as JSON lines (``pipelines.openai_batch`` builds each
line's object from the item's ``ResultRecord``).

Written by the jobs service when a batch ends (``jobs.batches``: two files) and by ``vlbatch run-batch`` (one file
with every line, as vLLM's ``run_batch`` writes it)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence

from pipelines.openai_batch import line_of_record
from vlbatch.db.results import ResultRecord

__all__ = ["batch_lines"]


def batch_lines(
    endpoint: str, pages: Iterable[Sequence[ResultRecord]], *, model: str, created: int
) -> Iterator[tuple[bool, bytes, ResultRecord]]:
    """(answered, the JSON line with its newline, the record) of every record, in order. ``model`` names a result
    that has none; ``created`` is each answer's time (seconds since 1970)."""
    for page in pages:
        for record in page:
            answered, line = line_of_record(endpoint, record, model=model, created=created)
            yield answered, (json.dumps(line, ensure_ascii=False) + "\n").encode(), record

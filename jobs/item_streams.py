"""Items read as they are inserted: a job over a folder of millions of files, or an NDJSON upload of item lines.

An ``ItemStream`` is what ``jobs.submit.insert`` takes in place of a list: it is read once, in order, while
``job_store.add_item_stream`` writes its items a batch at a time, so neither the API nor the CLI holds the job's
items. What a list is checked for before anything is stored is checked on the way instead (``bounded``): the item
limits as the count passes them, an empty stream at its end; a refusal raised mid-stream leaves the job's rows to the
caller's rollback. A dry run reads the stream as a list (``listed``), as it read a folder before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence

from jobs.quotas import check_job_size
from jobs.refusals import JobRefused
from vlbatch.db.job_store import NewItem
from vlbatch.errors import TOO_MANY_ITEMS
from vlbatch.settings import Settings

__all__ = ["ItemStream", "bounded"]


class ItemStream(Iterable[NewItem]):
    """Items made as they are read from ``source`` (called once per read).

    ``empty``: the refusal of a stream with no item (a ``JobRefused`` for a client; the embedded runner's own
    ``NothingToDo``). ``listed``: the items as a list, for a dry run (default: the stream read whole). ``count`` is
    the items read so far (after the insert: the job's size); ``warnings`` are what the insert found to warn of (a
    deadline the estimate misses), for the create's answer."""

    def __init__(
        self,
        source: Callable[[], Iterator[NewItem]],
        *,
        empty: Exception,
        listed: Callable[[], Sequence[NewItem]] | None = None,
    ) -> None:
        self._source = source
        self._listed = listed
        self.empty = empty
        self.count = 0
        self.warnings: list[str] = []

    def __iter__(self) -> Iterator[NewItem]:
        self.count = 0
        for item in self._source():
            self.count += 1
            yield item

    def listed(self) -> Sequence[NewItem]:
        items = self._listed() if self._listed is not None else list(self)
        if not items:
            raise self.empty
        return items


def bounded(stream: ItemStream, settings: Settings, tenant: str, *, admit: bool) -> Iterator[NewItem]:
    """``stream`` refused as soon as it passes ``VLBATCH_MAX_ITEMS_PER_JOB`` or the tenant's items quota (``admit``
    False: no limits, as for a list), and at its end when it held no item."""
    limit = settings.limits.max_items_per_job if admit else None
    quota = settings.quotas.quota(tenant).max_items_per_job if admit else None
    n = 0
    for n, item in enumerate(stream, 1):
        if limit is not None and n > limit:
            raise JobRefused(TOO_MANY_ITEMS, f"more than {limit} items: over the limit of {limit} items a job")
        if quota is not None and n > quota:
            check_job_size(settings, tenant, n_items=n)
        yield item
    if n == 0:
        raise stream.empty

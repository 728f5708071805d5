"""Duplicates run once: an image item whose bytes were answered before takes that answer without engine time.

An image item's content hash is taken from the bytes the worker reads anyway, before they are decoded
(``worker/held_items.py::first_step``); nothing is read twice, and the API never reads an album. The hash, the job's
processed-with marker and its tenant are the item's ``ReuseKey``. A key answered before (a result stored by this
job or an earlier one of the same tenant: ``vlbatch/db/reuse.py``) gives the item a copy of that answer, marked
``reused_from``. A key another held item is being answered for right now (copies side by side in a folder) makes
the item wait for that answer (``Waiting``): the first item to reach the key leads, the others follow it. A leader
that fails hands its followers back to be run on their own: only answers are reused, never failures.

The job option ``reuse: false`` turns the lookup off; the hash is still stored, so a later job may reuse the
answers of that one.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from vlbatch.db.outcomes import Marker, Outcome
from vlbatch.db.reuse import find_reusable
from worker.rounds import Waiting

__all__ = ["Duplicates", "ReuseKey", "content_hash", "copy_of"]

log = logging.getLogger(__name__)
_Held = TypeVar("_Held")  # what the feeder holds of an item (``worker.held_items.Held``), handed back as it was


def content_hash(data: list[bytes]) -> str:
    """sha256 of an item's image bytes: of the file itself for one image (what ``sha256sum`` prints), of the
    images' digests in order for several."""
    if len(data) == 1:
        return hashlib.sha256(data[0]).hexdigest()
    whole = hashlib.sha256(b"images:%d\n" % len(data))
    for raw in data:
        whole.update(hashlib.sha256(raw).digest())
    return whole.hexdigest()


@dataclass(frozen=True)
class ReuseKey:
    """What two items must share for one to take the other's answer."""

    tenant: str
    content_hash: str
    marker: Marker


@dataclass
class _Flight(Generic[_Held]):
    leader: int
    followers: list[_Held] = field(default_factory=list)
    answer: Outcome | None = None  # the leader's answer, taken and not yet written


class Duplicates(Generic[_Held]):
    """The feeder's duplicates: stored answers looked up, and items in flight with the same key led by one."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self._sessions = sessions
        self._lock = threading.Lock()
        self._flights: dict[ReuseKey, _Flight[_Held]] = {}
        self._led: dict[int, ReuseKey] = {}  # leader's item id -> its key

    def check(self, held: _Held, *, item_id: int, job_id: str, key: ReuseKey) -> Outcome | Waiting | None:
        """In the preprocessing pool, once the item's bytes are hashed: its reused outcome, ``Waiting`` (it follows
        a held item with its key, and comes back from ``settle``), or None (it runs, and leads its key's later
        duplicates)."""
        try:
            with self._sessions() as s:
                found = find_reusable(s, tenant=key.tenant, content_hash=key.content_hash, marker=key.marker)
        except SQLAlchemyError as exc:  # reuse saves engine time; a database hiccup must not fail the item
            log.warning("item %d: stored answers not looked up, the engine answers it: %s", item_id, exc)
            found = None
        if found is not None:
            answer = Outcome(found.origin, job_id, found.output, found.raw_text, 0, 0, prompt_hash=found.prompt_hash)
            return copy_of(answer, item_id=item_id, job_id=job_id, content_hash=key.content_hash)
        with self._lock:
            flight = self._flights.get(key)
            if flight is not None and flight.leader != item_id:
                if flight.answer is not None:  # answered, and its write not committed yet
                    return copy_of(flight.answer, item_id=item_id, job_id=job_id, content_hash=key.content_hash)
                flight.followers.append(held)
                return Waiting(flight.leader)
            self._flights[key] = _Flight(item_id)
            self._led[item_id] = key
        return None

    def settle(self, item_id: int, outcome: Outcome) -> list[_Held]:
        """The item's outcome is taken: the items that wait for it. Each takes a copy of an answer
        (``copy_of``); after a failure each runs on its own. An answer stays on offer to later duplicates until
        ``forget``, once it is written (the database then has it)."""
        with self._lock:
            key = self._led.get(item_id)
            flight = self._flights.get(key) if key is not None else None
            if flight is None or key is None:
                return []
            followers, flight.followers = flight.followers, []
            if outcome.error_code is None:
                flight.answer = outcome
            else:
                del self._flights[key], self._led[item_id]
        return followers

    def forget(self, item_id: int) -> None:
        """The item's outcome is written (or dropped): later duplicates find it in the database, if anywhere."""
        with self._lock:
            key = self._led.pop(item_id, None)
            if key is not None:
                self._flights.pop(key, None)


def copy_of(answer: Outcome, *, item_id: int, job_id: str, content_hash: str | None) -> Outcome:
    """An item's outcome that is a copy of another item's answer, naming the item the engine answered."""
    origin = answer.reused_from if answer.reused_from is not None else answer.item_id
    return Outcome(
        item_id,
        job_id,
        answer.output,
        answer.raw_text,
        0,
        0,
        content_hash=content_hash,
        reused_from=origin,
        prompt_hash=answer.prompt_hash,  # the prompt that made the answer
    )

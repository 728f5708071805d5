"""Re-enqueues chunks the broker lost or whose lease expired: the DB, not Redis, says what is left.

A pass pages through every candidate chunk by id, so no chunk waits behind a fixed first page. A chunk sent
and never claimed is sent again after ``stale_after``, then after twice that, and so on (``send_ledger.resend_wait``):
a lost message is found within ``stale_after`` (VLBATCH_UNCLAIMED_RESEND_S, well under a lease), while the
chunks of a model no worker serves are not re-sent every pass; those are reported as waiting for a worker.
Each pass also drops the broker keys of the queues whose last job ended within ``ENDED_WINDOW``
(``publisher.drop_queues``).
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta

from sqlalchemy.orm import Session, sessionmaker

from jobs.publisher import drop_queues, publish_chunks
from vlbatch.db import queues, send_ledger
from vlbatch.db.models import Job, utcnow
from vlbatch.settings import Settings

log = logging.getLogger(__name__)

PAGE = 1000
# Sent this many times and still unclaimed: no worker seems to serve the chunk's model.
WAITING_AFTER_SENDS = 3
# A queue whose last job ended this long ago had its keys dropped by an earlier pass (passes run every
# VLBATCH_RECONCILE_INTERVAL_S); older ones are not looked at again.
ENDED_WINDOW = timedelta(days=1)


@dataclass
class ReconcilePass:
    sent: int = 0
    # model -> chunks sent WAITING_AFTER_SENDS times or more and never claimed (no worker takes them)
    waiting: Counter[str] = field(default_factory=Counter)
    broker_down: bool = False
    dropped_queues: list[str] = field(default_factory=list)  # broker queues of ended models whose keys went


def reconcile_once(
    settings: Settings, sessions: sessionmaker[Session], *, stale_after: timedelta, page: int = PAGE
) -> ReconcilePass:
    report = ReconcilePass()
    after = 0
    while True:
        with sessions() as s:
            now = utcnow()
            chunks = send_ledger.chunks_to_enqueue(s, now=now, stale_after=stale_after, limit=page, after_id=after)
            if not chunks:
                break
            after = chunks[-1].id
            by_queue: dict[tuple[str, str], list[int]] = {}
            for c in chunks:
                job = s.get(Job, c.job_id)
                if job is None:
                    continue
                if send_ledger.due_for_send(c, now=now, stale_after=stale_after):
                    by_queue.setdefault((job.model, job.priority), []).append(c.id)
            for (model, priority), ids in by_queue.items():
                if publish_chunks(settings, model=model, priority=priority, chunk_ids=ids):
                    send_ledger.mark_enqueued(s, chunk_ids=ids)
                    report.sent += len(ids)
                else:
                    report.broker_down = True
            s.commit()
        if len(chunks) < page or report.broker_down:
            break
    with sessions() as s:
        report.waiting.update(send_ledger.unclaimed_by_model(s, min_sends=WAITING_AFTER_SENDS))
        ended = queues.ended_queues(s, since=utcnow() - ENDED_WINDOW)
    if ended and not report.broker_down:
        report.dropped_queues = drop_queues(settings, queues=ended)
    if report.sent:
        log.info("reconciler re-enqueued %d chunks", report.sent)
    for model, n in report.waiting.items():
        log.warning(
            "%d chunks for model %r sent %d+ times and never claimed: no worker serves it?",
            n,
            model,
            WAITING_AFTER_SENDS,
        )
    return report


def reconcile_forever(settings: Settings, sessions: sessionmaker[Session], stop: threading.Event) -> None:
    """A pass every VLBATCH_RECONCILE_INTERVAL_S until ``stop`` is set (engine workers and the API run it)."""
    stale = timedelta(seconds=settings.scheduling.unclaimed_resend_s)
    while not stop.wait(settings.scheduling.reconcile_interval_s):
        try:
            reconcile_once(settings, sessions, stale_after=stale)
        except Exception:  # a database or broker outage: the next pass tries again
            log.exception("reconciler pass failed")

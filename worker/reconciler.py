"""Re-enqueues chunks the broker lost or whose lease expired: the DB, not Redis, says what is left."""

from __future__ import annotations

import logging
from datetime import timedelta

from sqlalchemy.orm import Session, sessionmaker

from vlbatch.db import crud
from vlbatch.db.models import Job
from vlbatch.settings import Settings
from worker.queue import publish_chunks

log = logging.getLogger(__name__)


def reconcile_once(settings: Settings, sessions: sessionmaker[Session], *, stale_after: timedelta) -> int:
    with sessions() as s:
        chunks = crud.chunks_to_enqueue(s, now=crud.utcnow(), stale_after=stale_after, limit=1000)
        by_queue: dict[tuple[str, str], list[int]] = {}
        for c in chunks:
            job = s.get(Job, c.job_id)
            if job is not None:
                by_queue.setdefault((job.model, job.priority), []).append(c.id)
        sent = 0
        for (model, priority), ids in by_queue.items():
            if publish_chunks(settings, model=model, priority=priority, chunk_ids=ids):
                crud.mark_enqueued(s, chunk_ids=ids)
                sent += len(ids)
        s.commit()
    if sent:
        log.info("reconciler re-enqueued %d chunks", sent)
    return sent

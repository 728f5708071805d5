"""The reconciler (``jobs.reconciler``): re-sends what the broker lost, pages through every chunk, backs off and
reports the chunks no worker takes; on SQLite and PostgreSQL, publishing to the real Redis broker."""

from __future__ import annotations

import time
from datetime import timedelta

import redis
from sqlalchemy import update

from jobs.publisher import queue_name
from jobs.reconciler import WAITING_AFTER_SENDS, reconcile_once
from tests.support.db import queued_job
from vlbatch.db.models import Chunk, utcnow
from vlbatch.settings import Settings


def test_reconciler_pages_through_every_chunk_and_reports_the_unserved(db_url: str, redis_url: str) -> None:
    model = f"unserved-{time.monotonic_ns()}"
    factory, _ = queued_job(db_url, n=23, chunk=1, model=model)
    settings = Settings(database_url=db_url, broker_url=redis_url)
    r = redis.Redis.from_url(redis_url)
    key = queue_name(model, "batch")  # the priority a job gets when none is asked for
    try:
        stale = timedelta(seconds=30)
        first = reconcile_once(settings, factory, stale_after=stale, page=5)  # 23 chunks in pages of 5
        assert first.sent == 23 and not first.waiting
        assert r.llen(key) == 23
        assert reconcile_once(settings, factory, stale_after=stale, page=5).sent == 0  # backing off
        for _ in range(WAITING_AFTER_SENDS - 1):  # nobody claims them: each re-send waits twice as long
            with factory() as s:
                s.execute(update(Chunk).values(enqueued_at=utcnow() - timedelta(hours=1)))
                s.commit()
            assert reconcile_once(settings, factory, stale_after=stale, page=5).sent == 23
        report = reconcile_once(settings, factory, stale_after=stale, page=5)
        assert report.waiting == {model: 23} and report.sent == 0
    finally:
        r.delete(key)

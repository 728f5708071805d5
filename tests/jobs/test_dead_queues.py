"""The broker keys of a model's queue (its messages and bindings) go once the model's last job has ended: the
reconciler's pass drops them, and keeps every queue a job still uses. Real Redis; SQLite and PostgreSQL."""

from __future__ import annotations

import time
from datetime import timedelta

import redis

from jobs.publisher import queue_name
from jobs.reconciler import reconcile_once
from tests.support.db import queued_job
from vlbatch.db import job_store
from vlbatch.settings import Settings


def _keys(r: redis.Redis, queue: str) -> set[str]:
    return {k.decode() for k in r.keys(f"*{queue}*")}


def test_the_reconciler_drops_the_broker_keys_of_models_whose_last_job_ended(db_url: str, redis_url: str) -> None:
    stamp = time.monotonic_ns()
    gone_model, live_model = f"gone-{stamp}", f"live-{stamp}"
    factory, gone = queued_job(db_url, n=3, chunk=1, model=gone_model)
    with factory() as s:
        live = job_store.create_job(
            s,
            pipeline="image_tagging",
            model=live_model,
            options={},
            items=[job_store.NewItem(inputs={"images": ["0.jpg"]})],
            chunk_size=1,
        )
        s.commit()
    settings = Settings(database_url=db_url, broker_url=redis_url)
    r = redis.Redis.from_url(redis_url)
    gone_q, live_q = queue_name(gone_model, "batch"), queue_name(live_model, "batch")
    try:
        assert reconcile_once(settings, factory, stale_after=timedelta(seconds=30)).sent == 4  # both sent
        assert gone_q in _keys(r, gone_q) and len(_keys(r, gone_q)) >= 2  # the messages and the bindings
        with factory() as s:
            assert job_store.cancel_job(s, job_id=gone) is not None
            s.commit()
        report = reconcile_once(settings, factory, stale_after=timedelta(seconds=30))
        assert report.dropped_queues == [gone_q]
        assert _keys(r, gone_q) == set()  # the 3 messages no chunk needs, and the bindings
        assert r.llen(live_q) == 1 and live_q in _keys(r, live_q)  # a queue a job still uses is kept
        with factory() as s:
            assert job_store.cancel_job(s, job_id=live.id) is not None
            s.commit()
        assert reconcile_once(settings, factory, stale_after=timedelta(seconds=30)).dropped_queues == [live_q]
        assert _keys(r, live_q) == set()
    finally:
        r.delete(gone_q, live_q)

"""The one publisher (``jobs.publisher.send_chunks``): chunks are marked sent in a commit before any message names
them, and unmarked again when the broker refuses them; on SQLite and PostgreSQL."""

from __future__ import annotations

import base64
import json
import uuid
from datetime import timedelta

import redis
from sqlalchemy import select, update

from jobs import publisher
from tests.support.db import queued_job
from vlbatch.db import job_store, send_ledger
from vlbatch.db.models import Chunk, utcnow
from vlbatch.settings import Settings


def _reconciler_would_send(factory: object, job_id: str) -> set[int]:
    with factory() as s:  # type: ignore[operator]
        found = send_ledger.chunks_to_enqueue(s, now=utcnow(), stale_after=timedelta(seconds=60), limit=1000)
        return {c.id for c in found if c.job_id == job_id}


def test_chunks_being_published_are_not_the_reconcilers_and_unsent_ones_are(db_url: str, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """While a create publishes its chunks, a reconciler pass must not send them again (a million-item job got
    half its messages twice); chunks the broker refused go back to the reconciler."""
    factory, job_id = queued_job(db_url, n=10, chunk=4)
    seen_during_publish: list[set[int]] = []

    def publish(settings: Settings, *, model: str, priority: str, chunk_ids: list[int]) -> bool:
        seen_during_publish.append(_reconciler_would_send(factory, job_id))
        return accepted

    monkeypatch.setattr(publisher, "publish_chunks", publish)
    settings = Settings(database_url=db_url)
    for accepted in (True, False):
        with factory() as s:  # type: ignore[operator]
            chunk_ids = job_store.chunks_of(s, job_id=job_id)
            s.execute(update(Chunk).values(enqueued_at=None, sends=0))
            publisher.send_chunks(s, settings, model="m", priority="batch", chunk_ids=chunk_ids)
        assert seen_during_publish[-1] == set()
        assert _reconciler_would_send(factory, job_id) == (set() if accepted else set(chunk_ids))
    with factory() as s:  # type: ignore[operator]
        assert set(s.scalars(select(Chunk.sends).where(Chunk.job_id == job_id))) == {0}


def test_models_whose_names_differ_only_in_unsafe_characters_never_share_a_queue() -> None:
    names = ["org/m", "org_m", "org:m", "org m", "org_m+0", "Org/m"]
    queues = {publisher.queue_name(name, "batch") for name in names}
    assert len(queues) == len(names)
    assert publisher.queue_name("tiny", "batch") == "vlbatch.tiny.batch"  # plain names keep their queue


def test_a_publish_of_several_batches_sends_every_chunk_once_in_order_on_the_broker(redis_url: str) -> None:
    """Messages go out in pipelined batches: every chunk id arrives once, in the order given (a worker pops the
    oldest first), and a message names the task and its one chunk id."""
    settings = Settings(broker_url=redis_url)
    model = f"order-{uuid.uuid4().hex[:8]}"
    ids = list(range(1, 2 * publisher.PUBLISH_BATCH + 3))
    client = redis.Redis.from_url(redis_url)
    try:
        assert publisher.publish_chunks(settings, model=model, priority="batch", chunk_ids=ids)
        queued = [json.loads(m) for m in reversed(client.lrange(publisher.queue_name(model, "batch"), 0, -1))]
        assert [json.loads(base64.b64decode(m["body"]))[0] for m in queued] == [[i] for i in ids]
        assert {m["headers"]["task"] for m in queued} == {publisher.PROCESS_CHUNK}
    finally:
        publisher.drop_queues(settings, queues=[(model, "batch")])
        client.close()

"""The webhook store on SQLite and PostgreSQL: the outbox writes a delivery in the transaction that ends a job or a
batch (and a rollback takes both), only to the tenant's endpoints that want the event; claims are exclusive; the
janitor's ``delete_delivered_before`` deletes only ended deliveries before the cutoff, at most ``limit``."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from vlbatch.db import batches, engine_states, job_store, leases, webhooks
from vlbatch.db.models import BatchStatus, Item, ItemStatus, Job, utcnow
from vlbatch.db.session import make_engine, make_sessionmaker, migrate
from vlbatch.db.webhook_tables import WebhookAttempt, WebhookDelivery, WebhookEndpoint

pytestmark = pytest.mark.timeout(60)


def _sessions(db_url: str) -> sessionmaker[Session]:
    migrate(db_url)
    return make_sessionmaker(make_engine(db_url))


def _job(s: Session, *, tenant: str = "default", n: int = 2) -> Job:
    job = job_store.create_job(
        s,
        pipeline="image_tagging",
        model="m",
        options={},
        items=[job_store.NewItem(inputs={"images": [f"/{i}.jpg"]}) for i in range(n)],
        chunk_size=n,
        tenant=tenant,
    )
    s.flush()
    return job


def _finish_items(s: Session, job: Job, status: ItemStatus) -> int:
    for item in s.scalars(select(Item).where(Item.job_id == job.id)):
        item.status = status
    s.flush()
    [chunk_id] = job_store.chunks_of(s, job_id=job.id)
    return chunk_id


def _endpoint(s: Session, tenant: str, events: list[str]) -> WebhookEndpoint:
    return webhooks.create_endpoint(s, tenant=tenant, url="http://a/", events=events, description=None)


def _owed(s: Session) -> list[tuple[str, str, str | None]]:
    rows = s.scalars(select(WebhookDelivery).order_by(WebhookDelivery.endpoint_id, WebhookDelivery.event))
    return [(d.endpoint_id, d.event, d.subject_id) for d in rows]


def test_a_finished_job_owes_its_event_to_the_endpoints_that_want_it_in_the_same_transaction(db_url: str) -> None:
    sessions = _sessions(db_url)
    with sessions() as s:
        wants = webhooks.create_endpoint(
            s, tenant="default", url="http://a/", events=["job.completed"], description=None
        )
        failed_only = webhooks.create_endpoint(
            s, tenant="default", url="http://b/", events=["job.failed"], description=None
        )
        other_tenant = webhooks.create_endpoint(
            s, tenant="acme", url="http://c/", events=["job.completed"], description=None
        )
        job = _job(s)
        s.commit()
        chunk_id = _finish_items(s, job, ItemStatus.SUCCEEDED)
        assert leases.finish_chunk(s, chunk_id=chunk_id, owner="w1")
        assert _owed(s) == [(wants.id, "job.completed", job.id)]  # written with the job's end, not after it
        s.rollback()  # the end rolls back: so does the event
        assert _owed(s) == []
        chunk_id = _finish_items(s, job, ItemStatus.SUCCEEDED)
        leases.finish_chunk(s, chunk_id=chunk_id, owner="w1")
        s.commit()
        leases.finish_chunk(s, chunk_id=chunk_id, owner="w1")  # a chunk finished again: the job ended already
        s.commit()
        [d] = s.scalars(select(WebhookDelivery))
        assert d.endpoint_id == wants.id and d.payload["data"]["counts"]["succeeded"] == 2
        assert d.payload["type"] == "job.completed" and d.payload["data"]["status"] == "finished"
        assert {failed_only.id, other_tenant.id}.isdisjoint({d.endpoint_id})


def test_a_job_whose_every_item_failed_sends_job_failed_and_a_cancel_job_cancelled(db_url: str) -> None:
    sessions = _sessions(db_url)
    with sessions() as s:
        e = webhooks.create_endpoint(
            s, tenant="default", url="http://a/", events=["job.failed", "job.cancelled"], description=None
        )
        failing, cancelled = _job(s), _job(s)
        s.commit()
        leases.finish_chunk(s, chunk_id=_finish_items(s, failing, ItemStatus.FAILED), owner="w1")
        assert job_store.cancel_job(s, job_id=cancelled.id) == 2
        assert job_store.cancel_job(s, job_id=cancelled.id) is None  # cancelled already: no second event
        s.commit()
        assert sorted(_owed(s)) == sorted([(e.id, "job.failed", failing.id), (e.id, "job.cancelled", cancelled.id)])
        [payload] = [
            d.payload for d in s.scalars(select(WebhookDelivery).where(WebhookDelivery.event == "job.cancelled"))
        ]
        assert payload["data"]["counts"]["cancelled"] == 2 and payload["data"]["status"] == "cancelled"


def test_a_batch_owes_its_end_events(db_url: str) -> None:
    sessions = _sessions(db_url)
    with sessions() as s:
        e = webhooks.create_endpoint(
            s, tenant="default", url="http://a/", events=["batch.completed", "batch.failed"], description=None
        )
        done = batches.create_batch(
            s, tenant="default", endpoint="/v1/chat/completions", input_file_id="file-x",
            completion_window=timedelta(hours=24), window_text="24h", metadata=None,
        )  # fmt: skip
        bad = batches.create_batch(
            s, tenant="default", endpoint="/v1/chat/completions", input_file_id="file-y",
            completion_window=timedelta(hours=24), window_text="24h", metadata=None,
        )  # fmt: skip
        job = _job(s)
        done.job_id = job.id
        batches.finish(
            s, batch=done, status=BatchStatus.COMPLETED, stamp="completed_at", output_file_id="file-out",
            error_file_id=None, prompt_tokens=1, completion_tokens=1,
        )  # fmt: skip
        batches.fail(s, batch=bad, job=_job(s), errors=[])
        s.commit()
        owed = {d.event: d for d in s.scalars(select(WebhookDelivery))}
        assert set(owed) == {"batch.completed", "batch.failed"} and {d.endpoint_id for d in owed.values()} == {e.id}
        data = owed["batch.completed"].payload["data"]
        assert data["id"] == done.id and data["status"] == "completed" and data["request_counts"]["total"] == 2
        assert data["links"]["output"] == "/v1/files/file-out/content"


def test_claims_are_exclusive_and_a_claim_lapses(db_url: str) -> None:
    sessions = _sessions(db_url)
    with sessions() as s:
        e = webhooks.create_endpoint(s, tenant="default", url="http://a/", events=["ping"], description=None)
        for _ in range(5):
            webhooks.ping(s, endpoint=e, retry_for=timedelta(hours=1))
        s.commit()
    now = utcnow()
    with sessions() as a, sessions() as b:
        first = webhooks.claim_due(a, now=now, lease=timedelta(seconds=60), limit=3)
        if a.get_bind().dialect.name == "sqlite":
            a.commit()  # SQLite has one writer at a time: the second claim comes after, and sees the moved due times
        # on PostgreSQL the first sender's rows stay locked until it commits: the second skips them
        second = webhooks.claim_due(b, now=now, lease=timedelta(seconds=60), limit=10)
        b.commit()
        a.commit()
    assert len(first) == 3 and len(second) == 2 and not {d.id for d in first} & {d.id for d in second}
    with sessions() as s:
        assert webhooks.claim_due(s, now=now, lease=timedelta(seconds=60), limit=10) == []  # held
        later = webhooks.claim_due(s, now=now + timedelta(seconds=61), lease=timedelta(seconds=60), limit=10)
        assert len(later) == 5  # a sender that died leaves its claims due again


def test_delete_delivered_before_takes_only_ended_deliveries_before_the_cutoff(db_url: str) -> None:
    sessions = _sessions(db_url)
    with sessions() as s:
        e = webhooks.create_endpoint(s, tenant="default", url="http://a/", events=["ping"], description=None)
        rows = [webhooks.ping(s, endpoint=e, retry_for=timedelta(hours=1)) for _ in range(6)]
        ok = webhooks.Attempt(ok=True, status_code=200, latency_ms=3)
        bad = webhooks.Attempt(ok=False, status_code=500, latency_ms=3, error_code="webhook_http_error")
        day = timedelta(days=1)
        for d in rows[:3]:  # delivered
            webhooks.record_attempt(s, delivery=d, attempt=ok, retry_at=None, disable_after=day)
        webhooks.record_attempt(s, delivery=rows[3], attempt=bad, retry_at=None, disable_after=day)  # failed
        webhooks.record_attempt(s, delivery=rows[4], attempt=bad, retry_at=utcnow(), disable_after=day)  # pending
        s.commit()
        assert webhooks.owed_subjects(s, subject_ids=["x"]) == set()
        assert webhooks.delete_delivered_before(s, utcnow() - timedelta(hours=1), 100) == 0  # none that old
        assert webhooks.delete_delivered_before(s, utcnow() + timedelta(seconds=1), 2) == 2  # the limit holds
        assert webhooks.delete_delivered_before(s, utcnow() + timedelta(seconds=1), 100) == 2
        s.commit()
        left = {d.id: d.status for d in s.scalars(select(WebhookDelivery))}
        assert left == {rows[4].id: "pending", rows[5].id: "pending"}
        attempts = s.scalar(select(func.count()).select_from(WebhookAttempt))
        assert attempts == 1  # the deleted deliveries' attempts went with them


def test_results_are_owed_while_a_delivery_about_the_job_is_pending(db_url: str) -> None:
    sessions = _sessions(db_url)
    with sessions() as s:
        webhooks.create_endpoint(s, tenant="default", url="http://a/", events=["job.completed"], description=None)
        job, quiet = _job(s), _job(s)
        s.commit()
        leases.finish_chunk(s, chunk_id=_finish_items(s, job, ItemStatus.SUCCEEDED), owner="w1")
        s.commit()
        assert webhooks.owed_subjects(s, subject_ids=[job.id, quiet.id]) == {job.id}
        [d] = s.scalars(select(WebhookDelivery))
        webhooks.record_attempt(
            s,
            delivery=d,
            attempt=webhooks.Attempt(ok=True, status_code=204, latency_ms=1),
            retry_at=None,
            disable_after=timedelta(days=1),
        )
        s.commit()
        assert webhooks.owed_subjects(s, subject_ids=[job.id]) == set()


def test_the_breaker_that_stops_a_models_last_engine_stalls_its_open_jobs(db_url: str) -> None:
    sessions = _sessions(db_url)
    with sessions() as s:
        e = _endpoint(s, "default", ["job.stalled"])
        job, done = _job(s), _job(s)
        leases.finish_chunk(s, chunk_id=_finish_items(s, done, ItemStatus.SUCCEEDED), owner="w1")
        engine_states.report(s, owner="w2", model="m", state=engine_states.OK)
        engine_states.report(s, owner="w1", model="m", state=engine_states.BROKEN, reason="crashes")
        s.commit()
        assert _owed(s) == []  # w2 still serves the model: nothing stalls
        engine_states.report(s, owner="w2", model="m", state=engine_states.BROKEN, reason="crashes")
        engine_states.report(s, owner="w2", model="m", state=engine_states.BROKEN, reason="crashes")  # a reload
        engine_states.report(s, owner="w3", model="other", state=engine_states.BROKEN, reason="crashes")
        s.commit()
        assert _owed(s) == [(e.id, "job.stalled", job.id)]  # once, for the open job of the model only
        [d] = s.scalars(select(WebhookDelivery))
        assert d.payload["data"]["stalled"].startswith("the engine of worker w")

"""Pausing a queue (a model and priority) stops claims of every job's chunks on it, lets held work finish, and
resuming hands back the rest; other queues and jobs paused on their own are left as they are. On SQLite and
PostgreSQL, and over HTTP (admin keys only; resume publishes to the real broker)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import select
from sqlalchemy.orm import Session

from api.main import create_app
from vlbatch.db import job_store, leases, outcomes, queues, send_ledger
from vlbatch.db.models import Chunk, Job, JobStatus, utcnow
from vlbatch.db.session import make_engine, make_sessionmaker, migrate
from vlbatch.settings import Settings

LEASE = timedelta(minutes=5)
MARKER = outcomes.Marker(model="m", model_revision=None, pipeline_version="1", options_hash="h")


def _job(s: Session, *, priority: str, n: int = 6) -> tuple[str, list[int]]:
    job = job_store.create_job(
        s,
        pipeline="image_tagging",
        model="m",
        options={},
        items=[job_store.NewItem(inputs={"images": [f"{i}.jpg"]}) for i in range(n)],
        chunk_size=2,
        priority=priority,
    )
    s.commit()
    return job.id, job_store.chunks_of(s, job_id=job.id)


def _claimable(s: Session, chunk_id: int) -> bool:
    items = leases.claim_chunk(s, chunk_id=chunk_id, owner="probe", lease=LEASE)
    s.rollback()  # only asked: the claim is not kept
    return bool(items)


def test_pausing_a_queue_stops_claims_of_all_its_jobs_and_resume_hands_back_the_rest(db_url: str) -> None:
    migrate(db_url)
    factory = make_sessionmaker(make_engine(db_url))
    with factory() as s:
        a, a_chunks = _job(s, priority="batch")
        _b, b_chunks = _job(s, priority="batch")
        own, own_chunks = _job(s, priority="batch")  # paused on its own before, stays paused after
        other, other_chunks = _job(s, priority="interactive")  # same model, another queue
        held = leases.claim_chunk(s, chunk_id=a_chunks[0], owner="w1", lease=LEASE)  # in flight at the pause
        assert job_store.pause_job(s, job_id=own)
        s.commit()

        assert queues.pause_queue(s, model="m", priority="batch", by="admin")
        s.commit()
        assert not queues.pause_queue(s, model="m", priority="batch", by="admin")  # paused already
        assert not _claimable(s, a_chunks[1]) and not _claimable(s, b_chunks[0])  # no new claims on the queue
        assert _claimable(s, other_chunks[0])  # the interactive queue goes on
        stale = send_ledger.chunks_to_enqueue(s, now=utcnow() + timedelta(hours=1), stale_after=LEASE, limit=100)
        assert {c.job_id for c in stale} == {other}  # the reconciler sends nothing of the paused queue
        assert send_ledger.unclaimed_by_model(s, min_sends=0) == {"m": len(other_chunks)}
        listed = {(q.model, q.priority): q for q in queues.list_queues(s)}
        assert listed["m", "batch"].paused and listed["m", "batch"].active_jobs == 3
        assert listed["m", "batch"].paused_by == "admin" and not listed["m", "interactive"].paused

        # The held chunk finishes while the queue is paused.
        outcomes.record_outcomes(
            s, outcomes=[outcomes.Outcome(i.id, a, {"tags": ["t"]}, None, 1, 1) for i in held], markers={a: MARKER}
        )
        assert leases.finish_chunk(s, chunk_id=a_chunks[0], owner="w1")
        s.commit()
        assert job_store.item_counts(s, job_id=a)["succeeded"] == 2

        resent = queues.resume_queue(s, model="m", priority="batch")
        s.commit()
        assert resent == sorted(a_chunks[1:] + b_chunks)  # not the done one, not the job paused on its own
        assert queues.resume_queue(s, model="m", priority="batch") is None  # not paused any more
        unsent = s.scalars(select(Chunk.enqueued_at).where(Chunk.id.in_(resent)))
        assert all(at is None for at in unsent)  # left for the publish (or the reconciler)
        assert _claimable(s, a_chunks[1]) and _claimable(s, b_chunks[0])
        assert not _claimable(s, own_chunks[0])
        assert s.get(Job, own).status == JobStatus.PAUSED  # type: ignore[union-attr]
        assert not queues.list_queues(s)[0].paused


def test_queue_pause_and_resume_over_http(tmp_path: Path, redis_url: str, serve: type, api_key: Any) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'q.db'}", broker_url=redis_url, model_name="tiny")
    admin = api_key.header(api_key.make(settings.database.database_url, tenant="ops", admin=True))
    tenant_key = api_key.make(settings.database.database_url, tenant="acme")
    tenant = api_key.header(tenant_key)
    factory = make_sessionmaker(make_engine(settings.database.database_url))
    queue = {"model": "tiny", "priority": "batch"}
    with serve(create_app(settings)) as srv, httpx.Client(base_url=srv.url, headers=admin, timeout=30) as client:
        job = httpx.post(
            f"{srv.url}/v1/jobs/tagging", json={"items": [{"images": ["/a.jpg"]}] * 3}, headers=tenant
        ).json()
        refused = httpx.post(f"{srv.url}/v1/queues/pause", json=queue, headers=tenant)
        assert refused.status_code == 403 and refused.json()["code"] == "admin_required"  # every tenant's queue

        paused = client.post("/v1/queues/pause", json=queue)
        assert paused.status_code == 200, paused.text
        body = paused.json()
        assert body["paused"] and body["name"] == "vlbatch.tiny.batch" and body["active_jobs"] == 1
        assert body["paused_by"].startswith("ops/key-")
        again = client.post("/v1/queues/pause", json=queue)
        assert again.status_code == 409 and again.json()["code"] == "queue_state_conflict"
        assert client.get("/v1/queues").json() == [body]
        bad = client.post("/v1/queues/pause", json={"model": "tiny", "priority": "urgent"})
        assert bad.status_code == 422 and bad.json()["code"] == "invalid_request"
        seen = httpx.get(f"{srv.url}/v1/jobs/{job['id']}", headers=tenant).json()
        assert seen["queue_paused"] and seen["status"] == "queued"
        with httpx.Client(base_url=srv.url) as browser:
            assert browser.post("/ui/login", data={"key": tenant_key}).status_code in (200, 303)
            ui = browser.get(f"/ui/jobs/{job['id']}").text
        assert "queued (queue paused)" in ui
        with factory() as s:
            (chunk_id,) = job_store.chunks_of(s, job_id=job["id"])
            assert leases.claim_chunk(s, chunk_id=chunk_id, owner="w", lease=LEASE) == []
            s.rollback()

        resumed = client.post("/v1/queues/resume", json=queue)
        assert resumed.status_code == 200 and not resumed.json()["paused"]
        assert not httpx.get(f"{srv.url}/v1/jobs/{job['id']}", headers=tenant).json()["queue_paused"]
        with factory() as s:
            chunk = s.get(Chunk, chunk_id)
            assert chunk is not None and chunk.enqueued_at is not None  # sent to the broker again
            assert len(leases.claim_chunk(s, chunk_id=chunk_id, owner="w", lease=LEASE)) == 3
        gone = client.post("/v1/queues/resume", json=queue)
        assert gone.status_code == 409 and gone.json()["code"] == "queue_state_conflict"
        assert httpx.get(f"{srv.url}/v1/queues").status_code == 401

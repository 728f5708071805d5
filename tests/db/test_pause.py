"""Pausing a job stops new claims and lets held work finish; resuming sends the rest; the accounting stays
exact. On SQLite and PostgreSQL, and over HTTP."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from api.main import create_app
from vlbatch.db import job_store, leases, outcomes, send_ledger
from vlbatch.db.models import Job, JobStatus, utcnow
from vlbatch.db.session import make_engine, make_sessionmaker, migrate
from vlbatch.settings import Settings

LEASE = timedelta(minutes=5)
MARKER = outcomes.Marker(model="m", model_revision=None, pipeline_version="1", options_hash="h")


def _finish(s: Any, job_id: str, chunk_id: int, owner: str) -> int:
    items = leases.claim_chunk(s, chunk_id=chunk_id, owner=owner, lease=LEASE)
    outcomes.record_outcomes(
        s,
        outcomes=[outcomes.Outcome(i.id, job_id, {"tags": ["t"]}, None, 1, 1) for i in items],
        markers={job_id: MARKER},
    )
    leases.finish_chunk(s, chunk_id=chunk_id, owner=owner)
    s.commit()
    return len(items)


def test_pause_stops_claims_held_work_finishes_resume_sends_the_rest(db_url: str) -> None:
    migrate(db_url)
    factory = make_sessionmaker(make_engine(db_url))
    with factory() as s:
        job = job_store.create_job(
            s,
            pipeline="image_tagging",
            model="m",
            options={},
            items=[job_store.NewItem(inputs={"images": [f"{i}.jpg"]}) for i in range(10)],
            chunk_size=4,
        )
        s.commit()
        first, second, third = job_store.chunks_of(s, job_id=job.id)
        held = leases.claim_chunk(s, chunk_id=first, owner="w1", lease=LEASE)  # in flight when the pause comes
        s.commit()
        assert len(held) == 4 and s.get(Job, job.id).status == JobStatus.RUNNING  # type: ignore[union-attr]

        assert job_store.pause_job(s, job_id=job.id)
        s.commit()
        assert not job_store.pause_job(s, job_id=job.id)  # already paused
        assert leases.claim_chunk(s, chunk_id=second, owner="w2", lease=LEASE) == []  # no new claims
        stale = send_ledger.chunks_to_enqueue(s, now=utcnow() + timedelta(hours=1), stale_after=LEASE, limit=100)
        assert [c.id for c in stale if c.job_id == job.id] == []  # the reconciler leaves it alone too
        outcomes.record_outcomes(
            s,
            outcomes=[outcomes.Outcome(i.id, job.id, {"tags": ["t"]}, None, 1, 1) for i in held],
            markers={job.id: MARKER},
        )
        assert leases.finish_chunk(s, chunk_id=first, owner="w1")  # the held chunk finishes while paused
        s.commit()
        assert job_store.item_counts(s, job_id=job.id)["succeeded"] == 4

        assert job_store.resume_job(s, job_id=job.id) == [second, third]
        s.commit()
        assert job_store.resume_job(s, job_id=job.id) is None  # not paused any more
        assert s.get(Job, job.id).status == JobStatus.RUNNING  # type: ignore[union-attr]
        assert _finish(s, job.id, second, "w2") + _finish(s, job.id, third, "w2") == 6
        counts = job_store.item_counts(s, job_id=job.id)
        assert counts["succeeded"] == 10 and sum(counts.values()) == 10
        done = s.get(Job, job.id)
        assert done is not None and done.status == JobStatus.FINISHED
        assert not job_store.pause_job(s, job_id=job.id)  # a finished job does not pause


def test_a_never_started_job_resumes_as_queued(db_url: str) -> None:
    migrate(db_url)
    factory = make_sessionmaker(make_engine(db_url))
    with factory() as s:
        job = job_store.create_job(
            s,
            pipeline="image_tagging",
            model="m",
            options={},
            items=[job_store.NewItem({"images": ["a"]})],
            chunk_size=4,
        )
        s.commit()
        assert job_store.pause_job(s, job_id=job.id)
        assert job_store.resume_job(s, job_id=job.id) == job_store.chunks_of(s, job_id=job.id)
        s.commit()
        assert s.get(Job, job.id).status == JobStatus.QUEUED  # type: ignore[union-attr]


def test_pause_and_resume_over_http(tmp_path: Path, redis_url: str, serve: type, api_key: Any) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'p.db'}", broker_url=redis_url, model_name="tiny")
    key = api_key.header(api_key.make(settings.database.database_url, tenant="acme"))
    other = api_key.header(api_key.make(settings.database.database_url, tenant="other"))
    with serve(create_app(settings)) as srv, httpx.Client(base_url=srv.url, headers=key, timeout=30) as client:
        job = client.post("/v1/jobs/tagging", json={"items": [{"images": ["/a.jpg"]}] * 3}).json()
        paused = client.post(f"/v1/jobs/{job['id']}/pause")
        assert paused.status_code == 200 and paused.json()["status"] == "paused"
        again = client.post(f"/v1/jobs/{job['id']}/pause")
        assert again.status_code == 409 and again.json()["code"] == "job_state_conflict"
        assert client.post(f"/v1/jobs/{job['id']}/resume", headers=other).status_code == 404
        resumed = client.post(f"/v1/jobs/{job['id']}/resume")
        assert resumed.status_code == 200 and resumed.json()["status"] == "queued"
        assert client.post(f"/v1/jobs/{job['id']}/resume").json()["code"] == "job_state_conflict"
        client.post(f"/v1/jobs/{job['id']}/cancel")
        assert client.post(f"/v1/jobs/{job['id']}/pause").status_code == 409


@pytest.mark.parametrize("route", ["pause", "resume"])
def test_pause_routes_need_a_key(tmp_path: Path, redis_url: str, serve: type, route: str) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'k.db'}", broker_url=redis_url, model_name="tiny")
    with serve(create_app(settings)) as srv:
        assert httpx.post(f"{srv.url}/v1/jobs/x/{route}").status_code == 401

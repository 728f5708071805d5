"""Deadlines the database cannot read back, or that are already over, are refused at the door (422
invalid_request) on every job route, and nothing else breaks: the tenant's job, both job lists (the tenant's and
the admin's), /metrics, cancel and a worker's claim on the queue keep working. Over real HTTP on SQLite and
PostgreSQL; a row written past the API (an older release, a hand edit) with such a deadline stops no claim."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from PIL import Image
from sqlalchemy import text

from api.main import create_app
from vlbatch.db import claim_order, job_store
from vlbatch.db.models import utcnow
from vlbatch.db.session import make_engine, make_sessionmaker, migrate
from vlbatch.settings import Settings

# Year 1 at +14:00 is year 0 in UTC (1 BC), year 9999 at -14:00 is year 10000: PostgreSQL stores both, psycopg
# reads neither back. A past deadline would rank ahead of every job for ever.
HOSTILE = ["0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00", "2001-01-01T00:00:00+00:00"]


@pytest.mark.parametrize("route", ["/v1/jobs/tagging", "/v1/jobs", "/v1/jobs/documents"])
def test_deadlines_out_of_range_or_past_are_refused_and_every_route_keeps_working(
    db_url: str, redis_url: str, tmp_path: Path, serve: type, api_key: type, route: str
) -> None:
    root = tmp_path / "album"
    root.mkdir()
    Image.new("RGB", (64, 48), (9, 90, 60)).save(root / "0.jpg")
    (root / "0.pdf").write_bytes(b"%PDF-1.4\n%%EOF\n")
    settings = Settings(database_url=db_url, broker_url=redis_url, model_name="tiny", allowed_input_roots=[root])
    key, admin = api_key.make(db_url), api_key.make(db_url, admin=True)
    body: dict[str, object] = {"directory": str(root)}
    if route == "/v1/jobs":
        body["pipeline"] = "image_tagging"
    elif route == "/v1/jobs/documents":
        body |= {"pipeline": "classify", "options": {"labels": ["invoice", "letter"]}}
    with serve(create_app(settings)) as srv, httpx.Client(base_url=srv.url, timeout=30) as client:
        client.headers.update(api_key.header(key))
        good = client.post(route, json={**body, "deadline": (utcnow() + timedelta(hours=1)).isoformat()})
        assert good.status_code == 201, good.text
        for deadline in HOSTILE:
            for dry_run in (False, True):
                r = client.post(route, json={**body, "deadline": deadline, "dry_run": dry_run})
                assert r.status_code == 422, (deadline, r.text)
                assert r.json()["code"] == "invalid_request"
                assert "deadline" in r.text
        job_id = good.json()["id"]
        assert client.get(f"/v1/jobs/{job_id}").status_code == 200
        assert [j["id"] for j in client.get("/v1/jobs").json()["data"]] == [job_id]
        assert client.get("/v1/jobs", headers=api_key.header(admin)).status_code == 200
        assert client.get("/metrics", headers=api_key.header(admin)).status_code == 200
        with make_sessionmaker(make_engine(db_url))() as s:
            chunk = job_store.chunks_of(s, job_id=job_id)[0]
            leased, items = claim_order.claim_next(
                s, delivered=chunk, owner="w", lease=timedelta(minutes=2), shares=claim_order.Shares()
            )
            assert leased == chunk and items
            s.rollback()
        assert client.post(f"/v1/jobs/{job_id}/cancel").status_code == 200


def test_a_stored_deadline_psycopg_cannot_read_breaks_no_route_and_no_claim(
    pg_url: str, redis_url: str, serve: type, api_key: type
) -> None:
    sessions = make_sessionmaker(make_engine(pg_url))
    migrate(pg_url)
    key, admin = api_key.make(pg_url, tenant="a"), api_key.make(pg_url, admin=True)
    with sessions() as s:
        jobs = []
        for tenant in ("a", "b"):
            job = job_store.create_job(
                s,
                pipeline="image_tagging",
                model="m",
                options={},
                items=[job_store.NewItem(inputs={"images": ["0.jpg"]})],
                chunk_size=1,
                tenant=tenant,
            )
            jobs.append(job.id)
        s.commit()
        # As a release without the range stored them: 1 BC and 10000 AD, which PostgreSQL takes.
        s.execute(text("UPDATE jobs SET deadline = '0001-01-01 00:00:00+14' WHERE id = :id"), {"id": jobs[0]})
        s.execute(text("UPDATE jobs SET deadline = '9999-12-31 23:59:59-14' WHERE id = :id"), {"id": jobs[1]})
        s.commit()
        ranked = claim_order.ranked_jobs(s, model="m", priority="batch", now=utcnow(), shares=claim_order.Shares())
        assert sorted(ranked) == sorted(jobs)
        chunk = job_store.chunks_of(s, job_id=jobs[1])[0]
        leased, items = claim_order.claim_next(
            s, delivered=chunk, owner="w", lease=timedelta(minutes=2), shares=claim_order.Shares()
        )
        assert leased is not None and items
        s.rollback()
    settings = Settings(database_url=pg_url, broker_url=redis_url, model_name="m")
    with serve(create_app(settings)) as srv, httpx.Client(base_url=srv.url, timeout=30) as client:
        client.headers.update(api_key.header(key))
        assert client.get(f"/v1/jobs/{jobs[0]}").json()["deadline"].startswith("0001-01-01")
        assert [j["id"] for j in client.get("/v1/jobs").json()["data"]] == [jobs[0]]
        assert client.get("/v1/jobs", headers=api_key.header(admin)).status_code == 200
        assert client.get("/metrics", headers=api_key.header(admin)).status_code == 200
        assert client.post(f"/v1/jobs/{jobs[0]}/cancel").status_code == 200

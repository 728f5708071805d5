"""Dry runs and deadlines over real HTTP (SQLite and PostgreSQL, the real broker): ``"dry_run": true`` answers the
estimate with 200 and stores nothing; a job with a deadline shows its verdict in GET /v1/jobs/{id}, on the
dashboard and in /metrics; a deadline the measured rate misses is a warning, or 422 with strict_deadline."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import httpx
from PIL import Image

from api.main import create_app
from vlbatch.db.models import EngineSample, utcnow
from vlbatch.db.session import make_engine, make_sessionmaker
from vlbatch.settings import Settings


def test_dry_run_stores_nothing_and_deadlines_show_their_verdict(
    db_url: str, redis_url: str, tmp_path: Path, serve: type, api_key: type
) -> None:
    root = tmp_path / "album"
    root.mkdir()
    for i in range(3):
        Image.new("RGB", (640, 480), (i, 90, 60)).save(root / f"{i}.jpg")
    settings = Settings(database_url=db_url, broker_url=redis_url, model_name="tiny", allowed_input_roots=[root])
    key = api_key.make(db_url)
    with serve(create_app(settings)) as srv, httpx.Client(base_url=srv.url, timeout=30) as client:
        client.headers.update(api_key.header(key))
        body = {"directory": str(root), "options": {"max_tags": 5}}
        r = client.post("/v1/jobs/tagging", json={**body, "dry_run": True})
        assert r.status_code == 200, r.text
        e = r.json()
        assert e["dry_run"] is True and e["items"] == 3 and e["visual_tokens"] == 3 * 234
        assert e["engine_seconds"]["value"] is None and e["engine_seconds"]["assumption"]
        assert client.get("/v1/jobs").json()["data"] == []  # nothing stored

        deadline = (utcnow() + timedelta(hours=2)).isoformat()
        job = client.post("/v1/jobs/tagging", json={**body, "deadline": deadline}).json()
        assert job["deadline_status"] == "on_track" and job["warnings"] == []  # no rate yet to judge by
        assert client.get(f"/v1/jobs/{job['id']}").json()["deadline_status"] == "on_track"
        metrics = client.get("/metrics", headers=api_key.header(api_key.make(db_url, admin=True))).text
        assert 'vlbatch_jobs_deadline{queue="vlbatch.tiny.batch",status="on_track"} 1.0' in metrics

        with make_sessionmaker(make_engine(db_url))() as s:  # a worker serving 'tiny' at 1 item a minute
            now = utcnow()
            for k in range(3):
                s.add(EngineSample(worker="w", model="tiny", sampled_at=now - timedelta(minutes=3 - k), items_done=k))
            s.commit()
        soon = (utcnow() + timedelta(seconds=30)).isoformat()
        warned = client.post("/v1/jobs/tagging", json={**body, "deadline": soon})
        assert warned.status_code == 201 and "after the deadline" in warned.json()["warnings"][0]
        refused = client.post("/v1/jobs/tagging", json={**body, "deadline": soon, "strict_deadline": True})
        assert refused.status_code == 422 and refused.json()["code"] == "deadline_unmeetable"
        naive = client.post("/v1/jobs/tagging", json={**body, "deadline": "2030-01-01T07:00:00"})
        assert naive.status_code == 422  # a deadline needs its time zone

        client.post("/ui/login", data={"key": key})
        page = client.get(f"/ui/jobs/{job['id']}").text
        assert 'id="deadline"' in page and "on track" in page

"""A broken engine is said where operators look: /readyz answers 503 ``engine_canary_failed`` with the reason, a
job on its model says ``stalled``, and ``vlbatch_engine_breaker_open`` is 1 for the worker; another worker that
serves the model fine means the deployment moves, and nothing is stalled."""

from __future__ import annotations

from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from api.main import create_app
from vlbatch.db import engine_states, job_store
from vlbatch.db.session import make_engine, make_sessionmaker, migrate
from vlbatch.settings import Settings


def test_a_broken_engine_makes_the_api_not_ready_and_its_jobs_stalled(
    tmp_path: Path, redis_url: str, serve: type, api_key: type
) -> None:
    db_url = f"sqlite:///{tmp_path / 'api.db'}"
    migrate(db_url)
    sessions = make_sessionmaker(make_engine(db_url))
    with sessions() as s:
        job = job_store.create_job(
            s,
            pipeline="image_tagging",
            model="m",
            options={},
            items=[job_store.NewItem(inputs={"images": ["/a.jpg"]})],
            chunk_size=1,
        )
        other = job_store.create_job(
            s,
            pipeline="image_tagging",
            model="n",
            options={},
            items=[job_store.NewItem(inputs={"images": ["/b.jpg"]})],
            chunk_size=1,
        )
        engine_states.report(s, owner="w1", model="m", state=engine_states.BROKEN, reason="crashes on an image request")
        s.commit()
    settings = Settings(database_url=db_url, broker_url=redis_url, api_reconcile=False)
    key = api_key.make(db_url, admin=True)
    admin = api_key.header(key)
    with serve(create_app(settings)) as srv, httpx.Client(base_url=srv.url, timeout=30, headers=admin) as client:
        r = client.get("/readyz")
        assert r.status_code == 503 and r.json()["code"] == "engine_canary_failed", r.text
        assert "the engine of worker w1 crashes on an image request since " in r.json()["detail"]
        stalled = client.get(f"/v1/jobs/{job.id}").json()["stalled"]
        assert stalled.startswith("the engine of worker w1 crashes on an image request since ")
        assert client.get(f"/v1/jobs/{other.id}").json()["stalled"] is None  # another model's job moves
        client.post("/ui/login", data={"key": key})
        assert "stalled: the engine of worker w1" in client.get(f"/ui/jobs/{job.id}").text
        families = {f.name: f for f in text_string_to_metric_families(client.get("/metrics").text)}
        samples = [(s.labels, s.value) for s in families["vlbatch_engine_breaker_open"].samples]
        assert samples == [({"worker": "w1", "model": "m"}, 1.0)]

        with sessions() as s:  # a second worker serves the model fine: the deployment moves
            engine_states.report(s, owner="w2", model="m", state=engine_states.OK)
            s.commit()
        assert client.get("/readyz").json() == {"status": "ready"}
        assert client.get(f"/v1/jobs/{job.id}").json()["stalled"] is None

"""A job for a model no live worker serves is told so, from the workers' engine samples (their heartbeat): a warning
on the create's answer, or a 409 ``model_not_served`` when the setting asks; over real HTTP on both databases."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import httpx
import pytest

from api.main import create_app
from vlbatch.db.models import EngineSample, utcnow
from vlbatch.db.session import make_engine, make_sessionmaker, migrate
from vlbatch.settings import Settings

pytestmark = pytest.mark.timeout(120)
BODY = {"model": "tiny", "items": [{"images": ["/a.jpg"]}]}


def _heartbeat(db_url: str, model: str, *, ago_s: float = 0) -> None:
    migrate(db_url)
    engine = make_engine(db_url)
    with make_sessionmaker(engine)() as s:
        s.add(EngineSample(worker=f"w-{model}", model=model, sampled_at=utcnow() - timedelta(seconds=ago_s)))
        s.commit()
    engine.dispose()


def _client(db_url: str, redis_url: str, serve: type, api_key: type, **extra: object) -> Iterator[httpx.Client]:
    settings = Settings(database_url=db_url, broker_url=redis_url, model_name="tiny", **extra)  # type: ignore[arg-type]
    headers = api_key.header(api_key.make(db_url))
    with serve(create_app(settings)) as srv, httpx.Client(base_url=srv.url, timeout=30, headers=headers) as c:
        yield c


def test_a_job_for_a_model_no_live_worker_serves_is_warned(
    db_url: str, redis_url: str, tmp_path: Path, serve: type, api_key: type
) -> None:
    for client in _client(db_url, redis_url, serve, api_key):
        quiet = client.post("/v1/jobs/tagging", json=BODY)  # no worker ever sampled: nothing can be said
        assert quiet.status_code == 201 and quiet.json()["warnings"] == []
        _heartbeat(db_url, "tiny", ago_s=3600)  # a worker of the model, gone for an hour
        _heartbeat(db_url, "org/other")  # a live worker of another model
        warned = client.post("/v1/jobs/tagging", json=BODY)
        assert warned.status_code == 201, warned.text
        assert (
            len(warned.json()["warnings"]) == 1 and "no live worker serves model 'tiny'" in warned.json()["warnings"][0]
        )
        waiting = client.get(f"/v1/jobs/{warned.json()['id']}").json()  # its own status says so while it waits
        assert (
            waiting["warnings"] == warned.json()["warnings"]
            and "live workers serve: org/other" in waiting["warnings"][0]
        )
        _heartbeat(db_url, "tiny")
        assert client.post("/v1/jobs/tagging", json=BODY).json()["warnings"] == []
        assert client.get(f"/v1/jobs/{warned.json()['id']}").json()["warnings"] == []


def test_a_strict_setting_refuses_it(db_url: str, redis_url: str, tmp_path: Path, serve: type, api_key: type) -> None:
    _heartbeat(db_url, "other")
    for client in _client(db_url, redis_url, serve, api_key, model_not_served="refuse"):
        r = client.post("/v1/jobs/tagging", json=BODY)
        assert (r.status_code, r.json()["code"]) == (409, "model_not_served"), r.text
        assert client.get("/v1/jobs").json()["data"] == []

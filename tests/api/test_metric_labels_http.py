"""/metrics over real HTTP (SQLite and PostgreSQL): a queue's model appears as a label only when a worker serves
it (its engine samples of the last hour) or the API is configured with it; every other model's jobs are counted
under one ``other.<priority>`` label, so a client naming thousands of models adds no series."""

from __future__ import annotations

from datetime import timedelta

import httpx
from prometheus_client.parser import text_string_to_metric_families

from api.main import create_app
from vlbatch.db import job_store
from vlbatch.db.models import EngineSample, utcnow
from vlbatch.db.session import make_engine, make_sessionmaker, migrate
from vlbatch.settings import Settings

NAMES = 25


def test_queue_labels_come_from_a_bounded_set(db_url: str, redis_url: str, serve: type, api_key: type) -> None:
    migrate(db_url)
    now = utcnow()
    with make_sessionmaker(make_engine(db_url))() as s:
        for model in ["served", "configured", *(f"hostile-{i}" for i in range(NAMES))]:
            job = job_store.create_job(
                s,
                pipeline="image_tagging",
                model=model,
                options={},
                items=[job_store.NewItem(inputs={"images": ["0.jpg"]})],
                chunk_size=1,
            )
            job.deadline = now + timedelta(hours=1)
        s.add(EngineSample(worker="w:1", model="served", sampled_at=now - timedelta(minutes=1)))
        s.commit()
    settings = Settings(database_url=db_url, broker_url=redis_url, model_name="configured")
    admin = api_key.header(api_key.make(db_url, admin=True))
    with serve(create_app(settings)) as srv:
        body = httpx.get(f"{srv.url}/metrics", headers=admin, timeout=30).text
    queues: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            if "queue" in sample.labels:
                got = queues.setdefault(sample.name, {})
                got[sample.labels["queue"]] = got.get(sample.labels["queue"], 0) + sample.value
    bounded = {"vlbatch.served.batch", "vlbatch.configured.batch", "other.batch"}
    for name in ("vlbatch_items", "vlbatch_queue_depth_items", "vlbatch_jobs_deadline"):
        assert set(queues[name]) == bounded, (name, sorted(queues[name]))
    assert queues["vlbatch_queue_depth_items"]["other.batch"] == NAMES  # every hostile job's item, under one label
    assert queues["vlbatch_jobs_deadline"]["other.batch"] == NAMES

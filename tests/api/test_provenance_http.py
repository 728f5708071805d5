"""A result's provenance over real HTTP: the API's result, the JSONL, CSV and Parquet exports carry the model, its
revision, the pipeline version, the options' hash and the prompt's hash, alike; the job answers the options
themselves (those that shaped its answers)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import httpx
import pyarrow.parquet as pq
from sqlalchemy import update

from api.main import create_app
from tests.support.ledger import finished_job
from vlbatch.db import job_store
from vlbatch.db.models import Job, Result
from vlbatch.settings import Settings

PROVENANCE = ("model", "model_revision", "pipeline_version", "options_hash", "prompt_hash")
MADE_BY = {
    "model": "m",
    "model_revision": "rev7",
    "pipeline_version": "1",
    "options_hash": "h",
    "prompt_hash": "a" * 64,
}


def test_every_export_carries_the_provenance(tmp_path: Path, redis_url: str, serve: type, api_key: Any) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'p.db'}", broker_url=redis_url, model_name="m")
    factory, job_id = finished_job(
        settings.database.database_url, [({"images": ["/a.jpg"]}, {"tags": ["sea"]}), ({"images": ["/b.jpg"]}, None)]
    )
    with factory() as s:  # the writer's own test is tests/worker/test_provenance.py: here, what reads it
        s.execute(update(Result).where(Result.job_id == job_id).values(model_revision="rev7", prompt_hash="a" * 64))
        s.execute(update(Job).where(Job.id == job_id).values(options={"max_tags": 5, "reuse": False}))
        s.commit()
        options_hash = job_store.options_hash("image_tagging", {"max_tags": 5})
    key = api_key.header(api_key.make(settings.database.database_url))
    with serve(create_app(settings)) as srv, httpx.Client(base_url=srv.url, headers=key) as client:
        job = client.get(f"/v1/jobs/{job_id}").json()
        page = client.get(f"/v1/jobs/{job_id}/results").json()["data"]
        lines = [json.loads(line) for line in client.get(f"/v1/jobs/{job_id}/results.jsonl").text.splitlines()]
        rows = list(csv.DictReader(io.StringIO(client.get(f"/v1/jobs/{job_id}/results.csv").text)))
        table = pq.read_table(io.BytesIO(client.get(f"/v1/jobs/{job_id}/results.parquet").content)).to_pylist()

    assert page[1]["status"] == "failed"  # a failed attempt's result row says what it was made with too
    for done in (*page, *lines, *rows, *table):
        assert {name: done[name] for name in PROVENANCE} == MADE_BY
    assert lines == page
    # The options themselves are the job's: what shaped its answers, without those that only say how it runs.
    assert job["options"] == {"max_tags": 5}
    with factory() as s:
        stored = s.get(Job, job_id)
        assert stored is not None and job["options_hash"] == stored.options_hash
    assert job_store.options_hash("image_tagging", {"max_tags": 5, "reuse": False}) == options_hash

"""Expiry over HTTP with the official openai client: a file's ``expires_after`` and a batch's
``output_expires_after`` in OpenAI's shape, refused with ``invalid_expiry`` outside it, and ``expires_at`` shown
on files, batches and jobs before anything is deleted."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from api.main import create_app
from tests.conftest import make_key
from vlbatch.db.models import Batch
from vlbatch.db.session import make_engine, make_sessionmaker
from vlbatch.settings import Settings

openai = pytest.importorskip("openai")

pytestmark = [pytest.mark.services, pytest.mark.timeout(120)]

LINE = {
    "custom_id": "a",
    "method": "POST",
    "url": "/v1/chat/completions",
    "body": {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
}
DAY = 86400


@pytest.fixture
def api(tmp_path: Path, redis_url: str, serve: type) -> Any:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'r.db'}",
        broker_url=redis_url,
        model_name=f"nobody-{tmp_path.name}",  # no worker serves it: the batch stays in progress until cancelled
        data_dir=tmp_path / "data",
        retention_jobs_s=2 * DAY,
        janitor_interval_s=0,
    )
    with serve(create_app(settings)) as srv:
        yield srv, settings


def test_expiry_is_taken_in_openais_shape_and_shown(api: Any) -> None:
    srv, settings = api
    key = make_key(settings.database.database_url, tenant="acme")
    acme = openai.OpenAI(base_url=f"{srv.url}/v1", api_key=key, max_retries=0, timeout=30)
    data = (json.dumps(LINE) + "\n").encode()

    kept = acme.files.create(file=("in.jsonl", io.BytesIO(data)), purpose="batch")
    assert kept.expires_at is None  # no retention for files: kept for ever
    hour = acme.files.create(
        file=("in.jsonl", io.BytesIO(data)), purpose="batch", expires_after={"anchor": "created_at", "seconds": 3600}
    )
    assert hour.expires_at is not None and hour.expires_at - hour.created_at == 3600
    assert acme.files.retrieve(hour.id).expires_at == hour.expires_at
    for bad in ({"anchor": "created_at", "seconds": 60}, {"anchor": "last_active_at", "seconds": 3600}):
        with pytest.raises(openai.UnprocessableEntityError) as refused:
            acme.files.create(file=("in.jsonl", io.BytesIO(data)), purpose="batch", expires_after=bad)  # type: ignore[arg-type]
        assert refused.value.body["code"] == "invalid_expiry"

    headers = {"Authorization": f"Bearer {key}"}
    too_long = {"input_file_id": kept.id, "endpoint": "/v1/chat/completions"}
    for dry_run in (False, True):
        r = httpx.post(
            f"{srv.url}/v1/batches",
            json={
                **too_long,
                "dry_run": dry_run,
                "output_expires_after": {"anchor": "created_at", "seconds": 31 * DAY},
            },
            headers=headers,
            timeout=30,
        )
        assert r.status_code == 422 and r.json()["code"] == "invalid_expiry", r.text

    batch = acme.batches.create(
        input_file_id=kept.id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
        output_expires_after={"anchor": "created_at", "seconds": 7200},
    )
    shown = httpx.get(f"{srv.url}/v1/batches/{batch.id}", headers=headers).json()
    assert shown["output_expires_after"] == {"anchor": "created_at", "seconds": 7200}
    assert shown["output_expires_at"] is None  # not while it runs
    acme.batches.cancel(batch.id)
    done = httpx.get(f"{srv.url}/v1/batches/{batch.id}", headers=headers).json()
    assert done["status"] == "cancelled" and done["error_file_id"]
    error_file = acme.files.retrieve(done["error_file_id"])
    assert error_file.expires_at is not None and done["output_expires_at"] == error_file.expires_at
    assert 7200 - 5 <= error_file.expires_at - done["cancelled_at"] <= 7200 + 5

    # The batch's job shows the same time; a job without an expiry of its own shows its end plus two days.
    with make_sessionmaker(make_engine(settings.database.database_url))() as s:
        job_id = s.scalar(select(Batch.job_id).where(Batch.id == batch.id))
    job = httpx.get(f"{srv.url}/v1/jobs/{job_id}", headers=headers).json()
    assert job["expires_at"] is not None
    other = acme.batches.create(input_file_id=kept.id, endpoint="/v1/chat/completions", completion_window="24h")
    acme.batches.cancel(other.id)
    ended = httpx.get(f"{srv.url}/v1/batches/{other.id}", headers=headers).json()
    assert ended["output_expires_after"] is None
    assert 2 * DAY - 5 <= ended["output_expires_at"] - ended["cancelled_at"] <= 2 * DAY + 5


def test_the_api_runs_the_janitor_on_its_own_timer(tmp_path: Path, redis_url: str, serve: type) -> None:
    """An API started with VLBATCH_JANITOR_INTERVAL_S deletes what expired with no command run: the expired jobs and
    files go, the live ones stay."""
    import time

    from sqlalchemy import func

    from tests.support.retention_world import build
    from vlbatch.db.models import Job, StoredFile

    world = build(f"sqlite:///{tmp_path / 'j.db'}", tmp_path / "data")
    settings = world.settings.model_copy(update={"broker_url": redis_url, "janitor_interval_s": 0.2})
    with serve(create_app(settings)):
        deadline = time.monotonic() + 60  # a bound on a hung test, not a timing under test
        while time.monotonic() < deadline:
            with world.sessions() as s:
                if s.scalar(select(func.count()).select_from(StoredFile)) == len(world.kept_files):
                    break
            time.sleep(0.2)
    with world.sessions() as s:
        assert set(s.scalars(select(Job.id))) == {*world.kept_jobs, world.live_job}
        assert set(s.scalars(select(StoredFile.id))) == set(world.kept_files)

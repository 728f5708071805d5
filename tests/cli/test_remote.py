"""`vlbatch jobs submit|show|watch|list` against a real API over loopback HTTP, with a real key."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from rich.console import Console
from sqlalchemy import select

from api.main import create_app
from cli.remote import ApiClient, RemoteError, job_line, watch_job
from vlbatch.db import engine_states
from vlbatch.db.models import EngineSample, Item, ItemStatus, Job, JobStatus, utcnow
from vlbatch.db.session import make_engine, make_sessionmaker
from vlbatch.settings import Settings


@pytest.fixture
def live(tmp_path: Path, redis_url: str, serve: type, api_key: Any) -> Any:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'r.db'}", broker_url=redis_url, model_name="tiny")
    key = api_key.make(settings.database.database_url, tenant="acme")
    with serve(create_app(settings)) as srv:
        yield srv.url, key


def _create(url: str, key: str, n: int) -> dict[str, Any]:
    items = [{"images": [f"/x/{i}.jpg"]} for i in range(n)]
    r = httpx.post(f"{url}/v1/jobs/tagging", json={"items": items}, headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 201, r.text
    body: dict[str, Any] = r.json()
    return body


def test_watch_draws_progress_until_the_job_is_finished(live: tuple[str, str]) -> None:
    url, key = live
    job = _create(url, key, 5)
    client = ApiClient(url, key)
    polls: list[float] = []

    def cancel_on_second_poll(seconds: float) -> None:  # stands in for time passing while the job runs
        polls.append(seconds)
        if len(polls) == 2:
            httpx.post(f"{url}/v1/jobs/{job['id']}/cancel", headers={"Authorization": f"Bearer {key}"})

    out = io.StringIO()
    last = watch_job(client, job["id"], interval_s=0.5, sleep=cancel_on_second_poll, console=Console(file=out))
    assert last["status"] == "cancelled" and polls == [0.5, 0.5]
    assert "5/5" in out.getvalue() and "cancelled" in out.getvalue()
    assert job_line(last).startswith(f"{job['id']}  cancelled  5/5  failed 0  image_tagging  tiny")


def test_watch_says_once_why_a_job_is_stalled(live: tuple[str, str], tmp_path: Path) -> None:
    url, key = live
    job = _create(url, key, 2)
    sessions = make_sessionmaker(make_engine(f"sqlite:///{tmp_path / 'r.db'}"))
    with sessions() as s:  # the one worker serving the job's model has a broken engine
        engine_states.report(
            s, owner="w1", model="tiny", state=engine_states.BROKEN, reason="crashes on an image request"
        )
        s.commit()
    polls: list[float] = []

    def cancel_on_third_poll(seconds: float) -> None:
        polls.append(seconds)
        if len(polls) == 3:
            httpx.post(f"{url}/v1/jobs/{job['id']}/cancel", headers={"Authorization": f"Bearer {key}"})

    out = io.StringIO()
    watch_job(ApiClient(url, key), job["id"], interval_s=0.5, sleep=cancel_on_third_poll, console=Console(file=out))
    text = out.getvalue()
    assert text.count("stalled: the engine of worker w1 crashes on an image request since ") == 1, text


def test_errors_name_the_api_code_or_the_unreachable_address(live: tuple[str, str]) -> None:
    url, key = live
    with pytest.raises(RemoteError) as err:
        ApiClient(url, key).job("nope")
    assert err.value.code == "remote_error" and "HTTP 404" in str(err.value) and "job_not_found" in str(err.value)
    with pytest.raises(RemoteError, match="HTTP 401"):
        ApiClient(url, "vlb_wrong").job("nope")
    with pytest.raises(RemoteError, match=re.escape("cannot reach the API at http://127.0.0.1:9")):
        ApiClient("http://127.0.0.1:9", key, timeout_s=2).job("x")


def test_cli_show_and_list_use_the_configured_api_and_key(live: tuple[str, str]) -> None:
    url, key = live
    first, second = _create(url, key, 2), _create(url, key, 3)
    env = {**os.environ, "VLBATCH_API_URL": url, "VLBATCH_API_KEY": key}
    show = subprocess.run(
        [sys.executable, "-m", "cli.main", "jobs", "show", first["id"]], env=env, capture_output=True, text=True
    )
    assert show.returncode == 0, show.stderr
    assert json.loads(show.stdout)["total"] == 2
    listed = subprocess.run(
        [sys.executable, "-m", "cli.main", "jobs", "list", "--limit", "5"], env=env, capture_output=True, text=True
    )
    assert listed.returncode == 0, listed.stderr
    assert [line.split()[0] for line in listed.stdout.splitlines()] == [second["id"], first["id"]]  # newest first
    unauth = subprocess.run(
        [sys.executable, "-m", "cli.main", "jobs", "show", first["id"]],
        env={**env, "VLBATCH_API_KEY": "vlb_bad"},
        capture_output=True,
        text=True,
    )
    assert unauth.returncode == 1 and "error remote_error: HTTP 401" in unauth.stdout + unauth.stderr


def test_job_list_pages_newest_first_and_shows_a_tenant_only_its_own(
    tmp_path: Path, redis_url: str, serve: type, api_key: Any
) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'l.db'}", broker_url=redis_url, model_name="tiny")
    acme, other = (
        api_key.make(settings.database.database_url, tenant="acme"),
        api_key.make(settings.database.database_url, tenant="o"),
    )
    admin = api_key.make(settings.database.database_url, tenant="ops", admin=True)
    with serve(create_app(settings)) as srv:
        mine = [_create(srv.url, acme, 1)["id"] for _ in range(5)]
        theirs = _create(srv.url, other, 1)["id"]
        assert [j["id"] for j in ApiClient(srv.url, acme).jobs(limit=50)] == mine[::-1]
        first = httpx.get(f"{srv.url}/v1/jobs", params={"limit": 2}, headers=api_key.header(acme)).json()
        assert [j["id"] for j in first["data"]] == mine[:2:-1] and first["next_cursor"]
        assert [j["id"] for j in ApiClient(srv.url, other).jobs()] == [theirs]
        assert {j["id"] for j in ApiClient(srv.url, admin).jobs()} == {*mine, theirs}
        assert list(ApiClient(srv.url, acme).jobs(status="finished")) == []
        bad = httpx.get(f"{srv.url}/v1/jobs", params={"cursor": "yesterday"}, headers=api_key.header(acme))
        assert bad.status_code == 422 and bad.json()["code"] == "bad_cursor"


def _jobs_cli(url: str, key: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "VLBATCH_API_URL": url, "VLBATCH_API_KEY": key}
    return subprocess.run(
        [sys.executable, "-m", "cli.main", "jobs", *args], env=env, capture_output=True, text=True, timeout=120
    )


def test_a_job_for_a_model_no_live_worker_serves_says_so_in_its_status_and_list(
    live: tuple[str, str], tmp_path: Path
) -> None:
    url, key = live
    sessions = make_sessionmaker(make_engine(f"sqlite:///{tmp_path / 'r.db'}"))
    with sessions() as s:  # a live worker, of another model
        s.add(EngineSample(worker="w-other", model="other", sampled_at=utcnow()))
        s.commit()
    job = _create(url, key, 2)
    shown = ApiClient(url, key).job(job["id"])
    assert shown["status"] == "queued" and len(shown["warnings"]) == 1, shown
    warning = shown["warnings"][0]
    assert "no live worker serves model 'tiny'" in warning and "live workers serve: other" in warning
    route = re.search(r"GET (/v1/jobs/\S+)", warning)
    assert route is not None and route.group(1) == f"/v1/jobs/{job['id']}"
    assert httpx.get(url + route.group(1), headers={"Authorization": f"Bearer {key}"}).status_code == 200  # a tenant's
    listed = _jobs_cli(url, key, "list")
    assert listed.returncode == 0, listed.stderr
    assert f"{job['id']}  queued" in listed.stdout and "no live worker serves model 'tiny'" in listed.stdout
    with httpx.Client(base_url=url) as browser:  # the dashboard's list and job pages say it too
        browser.post("/ui/login", data={"key": key})
        assert "no live worker serves model" in browser.get("/ui").text
        assert "no live worker serves model" in browser.get(f"/ui/jobs/{job['id']}").text
    with sessions() as s:  # a worker of the job's model comes up: nothing more to say
        s.add(EngineSample(worker="w-tiny", model="tiny", sampled_at=utcnow()))
        s.commit()
    assert ApiClient(url, key).job(job["id"])["warnings"] == []
    assert "no live worker" not in _jobs_cli(url, key, "list").stdout


def test_a_job_whose_every_item_failed_says_so_loudly(live: tuple[str, str], tmp_path: Path) -> None:
    url, key = live
    failed, mixed = _create(url, key, 3), _create(url, key, 2)
    with make_sessionmaker(make_engine(f"sqlite:///{tmp_path / 'r.db'}"))() as s:  # as a worker leaves them
        for job_id, outcomes in ((failed["id"], ["failed"] * 3), (mixed["id"], ["failed", "succeeded"])):
            items = s.scalars(select(Item).where(Item.job_id == job_id).order_by(Item.seq)).all()
            for item, outcome in zip(items, outcomes, strict=True):
                item.status = ItemStatus(outcome)
                item.error_code = "context_too_small" if outcome == "failed" else None
            job_row = s.get(Job, job_id)
            assert job_row is not None
            job_row.status, job_row.finished_at = JobStatus.FINISHED, utcnow()
        s.commit()
    shown = ApiClient(url, key).job(failed["id"])
    assert shown["status"] == "finished"
    assert shown["warnings"] == [
        f"every item failed (3 of 3): GET /v1/jobs/{failed['id']}/items?status=failed has their errors"
    ]
    assert ApiClient(url, key).job(mixed["id"])["warnings"] == []  # one success: the failure count says the rest
    listed = _jobs_cli(url, key, "list").stdout.splitlines()
    assert [line.split()[0] for line in listed] == [mixed["id"], failed["id"]]
    assert "every item failed (3 of 3)" in listed[1] and "every item failed" not in listed[0]
    watched = _jobs_cli(url, key, "watch", failed["id"], "--interval", "0.1")
    assert watched.returncode == 1 and "every item failed (3 of 3)" in watched.stdout + watched.stderr
    assert _jobs_cli(url, key, "watch", mixed["id"], "--interval", "0.1").returncode == 0
    with httpx.Client(base_url=url) as browser:  # the dashboard's list and job pages say it too
        browser.post("/ui/login", data={"key": key})
        assert "every item failed (3 of 3)" in browser.get("/ui").text
        assert "every item failed (3 of 3)" in browser.get(f"/ui/jobs/{failed['id']}").text
        assert "every item failed" not in browser.get(f"/ui/jobs/{mixed['id']}").text


def test_submit_makes_a_tagging_job_over_a_folder_with_the_key(
    tmp_path: Path, redis_url: str, serve: type, api_key: Any
) -> None:
    from PIL import Image
    from typer.testing import CliRunner

    from cli.main import app

    album = tmp_path / "album"
    album.mkdir()
    for i in range(3):
        Image.new("RGB", (32, 24), (i * 80, 90, 30)).save(album / f"p{i}.jpg")
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 's.db'}",
        broker_url=redis_url,
        model_name="tiny",
        allowed_input_roots=[album],
    )
    key = api_key.make(settings.database.database_url, tenant="acme")

    def invoke(args: list[str], env: dict[str, str]) -> Any:
        from vlbatch.settings import get_settings

        get_settings.cache_clear()  # each command reads its own environment's settings
        try:
            return CliRunner().invoke(app, args, env=env)
        finally:
            get_settings.cache_clear()

    with serve(create_app(settings)) as srv:
        env = {"VLBATCH_API_URL": srv.url, "VLBATCH_API_KEY": key}
        args = ["jobs", "submit", str(album), "--max-tags", "2", "--caption", "--idempotency-key", "album-1"]
        made = invoke(args, env)
        assert made.exit_code == 0, made.output
        job_id = made.stdout.strip()
        assert re.fullmatch(r"[0-9a-f]{32}", job_id), made.stdout  # the id alone on stdout, for $(...)
        assert "3 items, queued, model tiny" in made.stderr
        job = ApiClient(srv.url, key).job(job_id)
        assert job["total"] == 3 and job["pipeline"] == "image_tagging" and job["model"] == "tiny"
        with make_sessionmaker(make_engine(settings.database.database_url))() as s:
            stored = s.get(Job, job_id)
            assert stored is not None and stored.options["max_tags"] == 2 and stored.options["caption"] is True

        again = invoke(args, env)  # the same Idempotency-Key and request: the same job
        assert again.exit_code == 0 and again.stdout.strip() == job_id

        outside = invoke(["jobs", "submit", str(tmp_path)], env)
        # The API's refusal, as `vlbatch` (cli.main.main) prints it in one line: `error remote_error: ...`.
        assert isinstance(outside.exception, RemoteError) and "input_path_refused" in str(outside.exception)
        bad = invoke(["jobs", "submit", str(album), "--options", "[1]"], env=env)
        assert bad.exit_code == 2 and "must be a JSON object" in bad.output
        nokey = invoke(["jobs", "submit", str(album)], {**env, "VLBATCH_API_KEY": "vlb_bad"})
        assert isinstance(nokey.exception, RemoteError) and "HTTP 401" in str(nokey.exception)

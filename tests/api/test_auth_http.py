"""API keys, tenants and quotas over real HTTP on SQLite and PostgreSQL, with the real Redis broker.

No key, a bad key and a revoked key are 401; every route but the probes takes a key (the docs and metrics
too); another tenant's job is 404 on every job route while an admin sees all; a browser form cannot cancel;
the quotas answer 413/429 with their codes, on jobs and on OpenAI-style batches alike (a refused batch stores
nothing), and concurrent creates cannot pass the active-jobs quota.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import redis
from fastapi import FastAPI
from fastapi.routing import APIRoute
from sqlalchemy import text

from api.main import create_app
from jobs.publisher import queue_name
from tests.conftest import make_key
from vlbatch.db.keys import find_key, revoke_key
from vlbatch.db.session import make_engine, make_sessionmaker
from vlbatch.settings import Settings, TenantQuota

OPEN = {"/healthz", "/readyz"}


@dataclass
class Api:
    url: str
    app: FastAPI
    settings: Settings
    keys: dict[str, str]  # acme, globex (tenants), ops (admin)

    def client(self, who: str | None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.keys[who]}"} if who else {}
        return httpx.Client(base_url=self.url, timeout=30, headers=headers)


def _settings(db_url: str, redis_url: str, root: Path, **extra: object) -> Settings:
    return Settings(
        database_url=db_url,
        broker_url=redis_url,
        model_name="tiny",
        chunk_size=5,
        allowed_input_roots=[root, Path("/x")],  # /x: the inline items' paths, never read here
        **extra,  # type: ignore[arg-type]
    )


@pytest.fixture
def api(db_url: str, redis_url: str, tmp_path: Path, serve: type, api_key: type) -> Iterator[Api]:
    root = tmp_path / "album"
    root.mkdir()
    settings = _settings(
        db_url,
        redis_url,
        root,
        tenant_max_items_per_job=50,
        tenant_max_active_jobs=3,
        tenant_quotas={
            "globex": TenantQuota(max_active_jobs=1),
            "acme": TenantQuota(max_upload_bytes=1000),
            "initech": TenantQuota(max_upload_total_bytes=45_000),
            "umbrella": TenantQuota(max_upload_files=3),
        },
        data_dir=tmp_path / "data",
    )
    keys = {
        "acme": api_key.make(db_url, tenant="acme"),
        "globex": api_key.make(db_url, tenant="globex"),
        "ops": api_key.make(db_url, tenant="ops", admin=True),
    }
    app = create_app(settings)
    with serve(app) as srv:
        yield Api(srv.url, app, settings, keys)


def _job(client: httpx.Client, n: int = 3, **headers: str) -> dict:
    r = client.post(
        "/v1/jobs/tagging", json={"items": [{"images": [f"/x/{i}.jpg"]} for i in range(n)]}, headers=headers
    )
    assert r.status_code == 201, r.text
    return dict(r.json())


def test_no_key_a_bad_key_and_a_revoked_key_are_401(api: Api) -> None:
    with api.client(None) as anon:
        for path in ("/v1/jobs/abc", "/v1/errors", "/v1/pipelines", "/docs", "/openapi.json", "/metrics"):
            r = anon.get(path)
            assert (r.status_code, r.json()["code"]) == (401, "unauthorized"), path
            assert r.headers["www-authenticate"] == "Bearer"
        assert anon.get("/healthz").status_code == 200 and anon.get("/readyz").json() == {"status": "ready"}
        forged = api.keys["acme"][:-4] + "AAAA"
        for headers in (
            {"Authorization": f"Bearer {forged}"},
            {"Authorization": "Bearer not-a-key"},
            {"Authorization": f"Basic {api.keys['acme']}"},
            {"X-API-Key": forged},
        ):
            r = anon.get("/v1/errors", headers=headers)
            assert (r.status_code, r.json()["code"]) == (401, "unauthorized"), headers
            assert forged not in r.text and api.keys["acme"] not in r.text  # the key is never echoed
        # the same key in X-API-Key works, as in Authorization
        assert anon.get("/v1/errors", headers={"X-API-Key": api.keys["acme"]}).status_code == 200

    with api.client("acme") as acme:
        assert acme.get("/v1/errors").status_code == 200
        assert acme.get("/openapi.json").json()["info"]["title"] == "vlbatch"
        assert "swagger" in acme.get("/docs").text.lower()
        r = acme.get("/metrics")  # every worker and chip: admins only
        assert (r.status_code, r.json()["code"]) == (403, "admin_required")
        factory = make_sessionmaker(make_engine(api.settings.database.database_url))
        with factory() as s:
            key = find_key(s, secret=api.keys["acme"])
            assert key is not None and key.tenant == "acme" and not key.is_admin
            assert revoke_key(s, key_id=key.id)
            s.commit()
        r = acme.get("/v1/errors")
        assert (r.status_code, r.json()["code"]) == (401, "unauthorized")
    with api.client("ops") as ops:
        assert ops.get("/metrics").status_code == 200


def test_every_route_but_the_probes_takes_a_key(api: Api) -> None:
    routes = [r for r in api.app.routes if isinstance(r, APIRoute)]
    assert {"/v1/jobs/{job_id}/cancel", "/docs", "/openapi.json", "/metrics"} <= {r.path for r in routes}
    with api.client(None) as anon:
        for route in routes:
            path = re.sub(r"\{[^}]+\}", "1", route.path)
            for method in route.methods:
                r = anon.request(method, path, json={})
                if route.path in OPEN:
                    assert r.status_code < 400, (method, route.path)
                elif route.path.startswith("/ui"):  # the dashboard's pages check a cookie: a login page or nothing
                    assert route.path == "/ui/login" or r.status_code in (303, 401, 403, 404), (method, route.path)
                else:
                    assert r.status_code == 401, (method, route.path, r.status_code, r.text[:200])


def test_another_tenants_job_is_not_found_and_an_admin_sees_all(api: Api) -> None:
    with api.client("acme") as acme, api.client("globex") as globex, api.client("ops") as ops:
        job = _job(acme)
        jid = job["id"]
        missing = {"detail": f"job '{jid}' not found", "code": "job_not_found"}
        for method, path, body in (
            ("GET", f"/v1/jobs/{jid}", None),
            ("GET", f"/v1/jobs/{jid}/items", None),
            ("GET", f"/v1/jobs/{jid}/results", None),
            ("GET", f"/v1/jobs/{jid}/results.jsonl", None),
            ("GET", f"/v1/jobs/{jid}/items?cursor=0", None),
            ("POST", f"/v1/jobs/{jid}/cancel", None),
            ("POST", f"/v1/jobs/{jid}/rerun", {"scope": "all"}),
        ):
            r = globex.request(method, path, json=body)
            # the same answer as for an id that does not exist: the id confirms nothing
            assert (r.status_code, r.json()) == (404, missing), (method, path)
            nobody = globex.request(method, path.replace(jid, "f" * 32), json=body).json()
            assert nobody["code"] == "job_not_found"
        assert acme.get(f"/v1/jobs/{jid}").json()["status"] == "queued"  # globex's cancel did nothing
        assert len(acme.get(f"/v1/jobs/{jid}/items").json()["data"]) == 3

        rerun = acme.post(f"/v1/jobs/{jid}/rerun", json={"scope": "all"})
        assert rerun.status_code == 201
        assert globex.get(f"/v1/jobs/{rerun.json()['id']}").status_code == 404  # the rerun is acme's too
        # an admin reads and cancels any tenant's job; the job stays acme's
        assert ops.get(f"/v1/jobs/{jid}").json()["id"] == jid
        assert ops.post(f"/v1/jobs/{jid}/cancel").json()["status"] == "cancelled"
        assert acme.get(f"/v1/jobs/{jid}").json()["status"] == "cancelled"


def test_idempotency_keys_are_per_tenant(api: Api) -> None:
    with api.client("acme") as acme, api.client("globex") as globex:
        a1 = _job(acme, **{"Idempotency-Key": "nightly-1"})
        a2 = _job(acme, **{"Idempotency-Key": "nightly-1"})
        g1 = _job(globex, **{"Idempotency-Key": "nightly-1"})
        assert a1["id"] == a2["id"] != g1["id"]
        assert globex.get(f"/v1/jobs/{a1['id']}").status_code == 404


def test_a_cross_site_form_post_cannot_cancel(api: Api, serve: type, tmp_path: Path) -> None:
    with api.client("acme") as acme, api.client(None) as anon:
        jid = _job(acme)["id"]
        form = anon.post(f"/v1/jobs/{jid}/cancel", data={"x": "1"})  # what an HTML form sends
        assert (form.status_code, form.json()["code"]) == (401, "unauthorized")
        multipart = anon.post(f"/v1/jobs/{jid}/cancel", files={"f": ("a.txt", b"x")})
        assert multipart.status_code == 401
        assert acme.get(f"/v1/jobs/{jid}").json()["status"] == "queued"

    # With auth off (a dev API) a browser's cross-site request is still refused; a client's is taken.
    root = tmp_path / "dev"
    root.mkdir()
    dev = _settings(f"sqlite:///{tmp_path / 'dev.db'}", api.settings.broker.broker_url, root, auth="off")
    with serve(create_app(dev)) as srv, httpx.Client(base_url=srv.url, timeout=30) as c:
        jid = _job(c)["id"]
        for site in ("cross-site", "same-site"):
            r = c.post(f"/v1/jobs/{jid}/cancel", data={"x": "1"}, headers={"Sec-Fetch-Site": site})
            assert (r.status_code, r.json()["code"]) == (403, "cross_site_refused")
        assert c.get(f"/v1/jobs/{jid}", headers={"Sec-Fetch-Site": "cross-site"}).json()["status"] == "queued"
        assert c.post(f"/v1/jobs/{jid}/cancel").json()["status"] == "cancelled"


def test_quotas_answer_413_and_429_with_their_codes(api: Api) -> None:
    with api.client("acme") as acme, api.client("globex") as globex:
        r = acme.post("/v1/jobs/tagging", json={"items": [{"images": [f"/x/{i}.jpg"]} for i in range(51)]})
        assert (r.status_code, r.json()["code"]) == (413, "items_quota_exceeded")
        assert "51 items" in r.json()["detail"] and "50" in r.json()["detail"]
        jobs = [_job(acme) for _ in range(3)]
        r = acme.post("/v1/jobs/tagging", json={"items": [{"images": ["/x/a.jpg"]}]})
        assert (r.status_code, r.json()["code"]) == (429, "active_jobs_quota_exceeded")
        assert "3 unfinished jobs" in r.json()["detail"]
        r = acme.post(f"/v1/jobs/{jobs[0]['id']}/rerun", json={"scope": "all"})  # a rerun is a new job too
        assert r.status_code == 429
        # the quota is per tenant: globex has its own (1, from VLBATCH_TENANT_QUOTAS)
        _job(globex)
        assert globex.post("/v1/jobs/tagging", json={"items": [{"images": ["/x/a.jpg"]}]}).status_code == 429
        # a finished or cancelled job no longer counts
        acme.post(f"/v1/jobs/{jobs[0]['id']}/cancel")
        _job(acme)


def test_concurrent_creates_cannot_pass_the_active_jobs_quota(api: Api) -> None:
    """The count and the insert are one step per tenant: racing creates get exactly the quota's room."""
    n, quota = 12, 3  # acme's active-jobs quota (tenant_max_active_jobs)
    barrier = threading.Barrier(n)

    def create(i: int) -> httpx.Response:
        with api.client("acme") as acme:
            body = {"items": [{"images": [f"/x/{i}-{k}.jpg"]} for k in range(2)]}
            barrier.wait(30)  # all n requests leave together
            return acme.post("/v1/jobs/tagging", json=body)

    with ThreadPoolExecutor(n) as pool:
        answers = list(pool.map(create, range(n)))
    codes = sorted(r.status_code for r in answers)
    assert codes == [201] * quota + [429] * (n - quota), [r.text for r in answers]
    assert {r.json()["code"] for r in answers if r.status_code == 429} == {"active_jobs_quota_exceeded"}
    engine = make_engine(api.settings.database.database_url)
    try:
        with engine.connect() as conn:
            stored = conn.execute(text("SELECT id FROM jobs WHERE tenant = 'acme'")).scalars().all()
    finally:
        engine.dispose()
    assert sorted(stored) == sorted(r.json()["id"] for r in answers if r.status_code == 201)
    with api.client("acme") as acme:  # and the quota still holds afterwards
        r = acme.post("/v1/jobs/tagging", json={"items": [{"images": ["/x/a.jpg"]}]})
        assert (r.status_code, r.json()["code"]) == (429, "active_jobs_quota_exceeded")


def test_an_upload_over_the_tenants_quota_is_413(api: Api) -> None:
    if "/v1/files" not in {getattr(r, "path", "") for r in api.app.routes}:
        pytest.skip("this build has no upload route")
    line = b'{"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": {}}\n'
    with api.client("acme") as acme, api.client("globex") as globex:
        big = {"file": ("big.jsonl", line * 20)}  # > 1000 bytes
        r = acme.post("/v1/files", files=big, data={"purpose": "batch"})
        assert (r.status_code, r.json()["code"]) == (413, "upload_quota_exceeded"), r.text
        assert "1000 bytes" in r.json()["detail"]
        assert acme.get("/v1/files").json()["data"] == []  # nothing was stored
        small = acme.post("/v1/files", files={"file": ("s.jsonl", line)}, data={"purpose": "batch"})
        assert small.status_code == 200, small.text
        assert globex.post("/v1/files", files=big, data={"purpose": "batch"}).status_code == 200  # its own quota
        assert globex.get(f"/v1/files/{small.json()['id']}").status_code == 404  # acme's file


def test_concurrent_uploads_cannot_pass_the_tenants_totals_and_a_delete_makes_room(api: Api) -> None:
    """20 uploads of 10 kB at once against 45 kB held: exactly 4 are kept; the others are 413 with their code."""
    n, size = 20, 10_000
    key = make_key(api.settings.database.database_url, tenant="initech")
    barrier = threading.Barrier(n)

    def upload(i: int) -> httpx.Response:
        with httpx.Client(base_url=api.url, timeout=60, headers={"Authorization": f"Bearer {key}"}) as client:
            barrier.wait(30)
            return client.post("/v1/files", files={"file": (f"{i}.jsonl", b"x" * size)}, data={"purpose": "batch"})

    with ThreadPoolExecutor(n) as pool:
        answers = list(pool.map(upload, range(n)))
    kept = [r.json()["id"] for r in answers if r.status_code == 200]
    assert len(kept) == 4, [r.text for r in answers]
    assert {(r.status_code, r.json()["code"]) for r in answers if r.status_code != 200} == {
        (413, "uploads_held_quota_exceeded")
    }
    with httpx.Client(base_url=api.url, timeout=30, headers={"Authorization": f"Bearer {key}"}) as client:
        listed = client.get("/v1/files").json()["data"]
        assert sorted(f["id"] for f in listed) == sorted(kept)  # nothing else was stored
        on_disk = [p for p in (api.settings.uploads.data_dir / "files").iterdir() if p.is_file()]
        assert len(on_disk) == len(kept)  # the refused uploads' bytes are gone too
        assert client.delete(f"/v1/files/{kept[0]}").status_code == 200
        again = client.post("/v1/files", files={"file": ("again.jsonl", b"x" * size)}, data={"purpose": "batch"})
        assert again.status_code == 200, again.text

    umbrella = make_key(api.settings.database.database_url, tenant="umbrella")  # a quota on files held, not bytes
    with httpx.Client(base_url=api.url, timeout=30, headers={"Authorization": f"Bearer {umbrella}"}) as client:
        codes = [
            client.post("/v1/files", files={"file": (f"{i}.jsonl", b"y")}, data={"purpose": "batch"}).status_code
            for i in range(4)
        ]
        assert codes == [200, 200, 200, 413]
        over = client.post("/v1/files", files={"file": ("z.jsonl", b"y")}, data={"purpose": "batch"})
        assert over.json()["code"] == "uploads_held_quota_exceeded" and "3" in over.json()["detail"]


def _chat_lines(n: int) -> bytes:
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    line = {"method": "POST", "url": "/v1/chat/completions", "body": body}
    return "".join(json.dumps({"custom_id": f"r{i}", **line}) + "\n" for i in range(n)).encode()


def _upload(client: httpx.Client, content: bytes) -> str:
    r = client.post("/v1/files", files={"file": ("in.jsonl", content)}, data={"purpose": "batch"})
    assert r.status_code == 200, r.text
    return str(r.json()["id"])


def _batch(client: httpx.Client, file_id: str) -> httpx.Response:
    body = {"input_file_id": file_id, "endpoint": "/v1/chat/completions", "completion_window": "24h"}
    return client.post("/v1/batches", json=body)


@dataclass(frozen=True)
class Stored:
    """What a create may leave behind: the tenant's jobs, batches and chunks, and messages on the model's queue."""

    jobs: int
    batches: int
    chunks: int
    queued_messages: int


def _stored(api: Api, tenant: str) -> Stored:
    engine = make_engine(api.settings.database.database_url)
    try:
        with engine.connect() as conn:
            count = lambda sql: conn.execute(text(sql), {"t": tenant}).scalar_one()  # noqa: E731
            jobs = count("SELECT count(*) FROM jobs WHERE tenant = :t")
            batches = count("SELECT count(*) FROM batches WHERE tenant = :t")
            chunks = count("SELECT count(*) FROM chunks JOIN jobs ON jobs.id = chunks.job_id WHERE jobs.tenant = :t")
    finally:
        engine.dispose()
    broker = redis.Redis.from_url(api.settings.broker.broker_url)
    try:
        queued = int(broker.llen(queue_name("tiny", "batch")))
    finally:
        broker.close()
    return Stored(jobs, batches, chunks, queued)


def test_batch_creation_answers_to_the_job_quotas_and_stores_nothing_when_refused(api: Api) -> None:
    """A batch runs as a job: its lines count against the items quota (413) and it takes an active-jobs slot
    (429), with the codes and messages of POST /v1/jobs; a refused batch leaves no job, batch, chunk or message,
    and its input file is left as it was, ready for a later batch."""
    with api.client("globex") as globex:  # items quota 50, active-jobs quota 1
        big = _chat_lines(51)
        too_big = _upload(globex, big)
        before = _stored(api, "globex")
        r = _batch(globex, too_big)
        assert (r.status_code, r.json()["code"]) == (413, "items_quota_exceeded"), r.text
        assert "51 items" in r.json()["detail"] and "50" in r.json()["detail"]
        assert _stored(api, "globex") == before == Stored(0, 0, 0, before.queued_messages)

        small = _upload(globex, _chat_lines(2))
        job = _job(globex)
        before = _stored(api, "globex")
        r = _batch(globex, small)
        assert (r.status_code, r.json()["code"]) == (429, "active_jobs_quota_exceeded"), r.text
        assert "1 unfinished jobs" in r.json()["detail"]
        assert _stored(api, "globex") == before
        assert globex.get("/v1/batches").json()["data"] == []
        assert globex.get(f"/v1/files/{small}/content").content == _chat_lines(2)  # the file is not consumed

        globex.post(f"/v1/jobs/{job['id']}/cancel")  # room again: the same file makes a batch now
        made = _batch(globex, small)
        assert made.status_code == 200 and made.json()["status"] == "in_progress", made.text
        after = _stored(api, "globex")
        assert (after.jobs, after.batches, after.chunks) == (before.jobs + 1, 1, before.chunks + 1)
        # and the running batch holds the one slot: neither a job nor another batch gets in
        r = globex.post("/v1/jobs/tagging", json={"items": [{"images": ["/x/a.jpg"]}]})
        assert (r.status_code, r.json()["code"]) == (429, "active_jobs_quota_exceeded")
        assert _batch(globex, small).status_code == 429


def test_a_batch_with_no_valid_line_fails_without_holding_an_active_job(api: Api) -> None:
    with api.client("globex") as globex:  # active-jobs quota 1
        bad = _upload(globex, b"{not json\n")
        failed = _batch(globex, bad)
        assert failed.status_code == 200 and failed.json()["status"] == "failed", failed.text
        assert _batch(globex, _upload(globex, _chat_lines(1))).json()["status"] == "in_progress"


def test_concurrent_batch_creates_cannot_pass_the_active_jobs_quota(api: Api) -> None:
    n, quota = 8, 3  # initech has the default active-jobs quota (tenant_max_active_jobs)
    key = make_key(api.settings.database.database_url, tenant="initech")
    with httpx.Client(base_url=api.url, timeout=30, headers={"Authorization": f"Bearer {key}"}) as c:
        file_id = _upload(c, _chat_lines(3))
    barrier = threading.Barrier(n)

    def create(_: int) -> httpx.Response:
        with httpx.Client(base_url=api.url, timeout=30, headers={"Authorization": f"Bearer {key}"}) as c:
            barrier.wait(30)  # all n requests leave together
            return _batch(c, file_id)

    with ThreadPoolExecutor(n) as pool:
        answers = list(pool.map(create, range(n)))
    assert sorted(r.status_code for r in answers) == [200] * quota + [429] * (n - quota), [r.text for r in answers]
    assert {r.json()["code"] for r in answers if r.status_code == 429} == {"active_jobs_quota_exceeded"}
    stored = _stored(api, "initech")
    assert (stored.jobs, stored.batches) == (quota, quota)

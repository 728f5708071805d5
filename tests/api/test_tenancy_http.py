"""Tenants against each other and against the server's disk, over real HTTP on SQLite and PostgreSQL: each tenant
submits only under its own roots, a refusal names no root, folders with non-UTF-8 names submit, a batch's job is
driven only through /v1/batches, results cursors are strict."""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from api.main import create_app
from tests.conftest import KeyMaker, LiveServer
from vlbatch.db import tenants
from vlbatch.db.models import Batch
from vlbatch.db.session import make_engine, make_sessionmaker, migrate
from vlbatch.settings import Settings

pytestmark = pytest.mark.timeout(120)


@dataclass
class Tenancy:
    url: str
    root: Path  # the global root
    a: httpx.Client  # tenant "a": its own roots root/a (inputs) and root/a-out (outputs)
    b: httpx.Client  # tenant "b": its own roots root/b
    loose: httpx.Client  # tenant "c": no roots of its own
    settings: Settings


def _set_roots(settings: Settings, tenant: str, inputs: list[Path], outputs: list[Path] | None = None) -> None:
    migrate(settings.database.database_url)
    engine = make_engine(settings.database.database_url)
    with make_sessionmaker(engine)() as s:
        out = None if outputs is None else [str(p) for p in outputs]
        tenants.set_roots(s, settings, tenant=tenant, inputs=[str(p) for p in inputs], outputs=out)
        s.commit()
    engine.dispose()


def _tenancy(
    db_url: str, redis_url: str, tmp_path: Path, serve: type, api_key: type, **extra: object
) -> Iterator[Tenancy]:
    root = tmp_path / "shared"
    for folder in ("a", "a-out", "b", "c"):
        (root / folder).mkdir(parents=True)
        (root / folder / "photo.jpg").write_bytes(b"\xff\xd8 not decoded by any test here")
    settings = Settings(
        database_url=db_url,
        broker_url=redis_url,
        model_name="tiny",
        allowed_input_roots=[root],
        data_dir=tmp_path / "data",
        **extra,  # type: ignore[arg-type]
    )
    _set_roots(settings, "a", [root / "a"], [root / "a-out"])
    _set_roots(settings, "b", [root / "b"])
    keys = {t: api_key.make(db_url, tenant=t) for t in ("a", "b", "c")}
    with serve(create_app(settings)) as srv:
        clients = {t: httpx.Client(base_url=srv.url, timeout=30, headers=api_key.header(k)) for t, k in keys.items()}
        try:
            yield Tenancy(srv.url, root, clients["a"], clients["b"], clients["c"], settings)
        finally:
            for c in clients.values():
                c.close()


@pytest.fixture
def env(db_url: str, redis_url: str, tmp_path: Path, serve: type, api_key: type) -> Iterator[Tenancy]:
    yield from _tenancy(db_url, redis_url, tmp_path, serve, api_key)


@pytest.fixture(scope="module")
def module_env(module_db_url: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tenancy]:
    """One server and database per module and backend, for tests that each make and look at a job of their own."""
    yield from _tenancy(module_db_url, redis_url, tmp_path_factory.mktemp("tenancy"), LiveServer, KeyMaker)


def _refused(r: httpx.Response, *secrets: Path) -> None:
    assert (r.status_code, r.json()["code"]) == (422, "input_path_refused"), r.text
    for secret in secrets:  # no root is named to the client, its own or another tenant's
        assert str(secret) not in r.json()["detail"].replace(r.request.content.decode(errors="replace"), "")


def test_a_tenant_submits_only_under_its_own_roots(env: Tenancy) -> None:
    a_root, b_root = env.root / "a", env.root / "b"
    ok = env.a.post("/v1/jobs/tagging", json={"directory": str(a_root)})
    assert ok.status_code == 201, ok.text
    other = env.a.post("/v1/jobs/tagging", json={"directory": str(b_root)})
    assert (other.status_code, other.json()["code"]) == (422, "input_path_refused")
    assert str(a_root) not in other.json()["detail"] and "allowed input roots" in other.json()["detail"]
    shared = env.a.post("/v1/jobs/tagging", json={"directory": str(env.root)})  # the global root holds b's too
    assert (shared.status_code, shared.json()["code"]) == (422, "input_path_refused")
    assert env.b.post("/v1/jobs/tagging", json={"directory": str(b_root)}).status_code == 201


def test_a_document_job_writes_only_into_its_tenants_output_roots(env: Tenancy) -> None:
    doc = env.root / "a" / "note.txt"
    doc.write_text("a note")
    body = {"pipeline": "summarize", "items": [{"path": str(doc)}]}
    into_b = env.a.post("/v1/jobs/documents", json={**body, "output_dir": str(env.root / "b" / "out")})
    assert (into_b.status_code, into_b.json()["code"]) == (422, "input_path_refused")
    own = env.a.post("/v1/jobs/documents", json={**body, "output_dir": str(env.root / "a-out" / "json")})
    assert own.status_code == 201, own.text
    b_doc = env.root / "b" / "secret.txt"
    b_doc.write_text("b's")
    stolen = env.a.post("/v1/jobs/documents", json={"pipeline": "summarize", "items": [{"path": str(b_doc)}]})
    assert (stolen.status_code, stolen.json()["code"]) == (422, "input_path_refused")


def test_the_refusal_names_no_root(env: Tenancy) -> None:
    for client in (env.a, env.loose):
        r = client.post("/v1/jobs/tagging", json={"directory": "/etc"})
        assert (r.status_code, r.json()["code"]) == (422, "input_path_refused")
        detail = r.json()["detail"]
        assert str(env.root) not in detail and "/a" not in detail.replace("/etc", ""), detail


def test_outside_the_roots_an_existing_and_a_missing_path_answer_alike(env: Tenancy) -> None:
    outside = env.root.parent / "outside"
    outside.mkdir()
    answers = []
    for path in (outside, outside / "none"):
        r = env.a.post("/v1/jobs/tagging", json={"directory": str(path)})
        answers.append((r.status_code, r.json()["code"], r.json()["detail"].replace(str(path), "<path>")))
    assert answers[0] == answers[1]


def test_a_tenant_without_roots_reads_nothing_when_roots_are_required(
    db_url: str, redis_url: str, tmp_path: Path, serve: type, api_key: type
) -> None:
    for env in _tenancy(db_url, redis_url, tmp_path, serve, api_key, tenant_roots_required=True):
        r = env.loose.post("/v1/jobs/tagging", json={"directory": str(env.root / "c")})
        assert (r.status_code, r.json()["code"]) == (422, "input_path_refused")
        assert "no input roots are configured" in r.json()["detail"]
        assert env.a.post("/v1/jobs/tagging", json={"directory": str(env.root / "a")}).status_code == 201


def test_a_folder_with_a_name_that_is_not_utf8_submits_and_marks_that_item(env: Tenancy) -> None:
    folder = env.root / "a"
    os.mkdir(os.fsencode(folder / "old"))
    with open(os.fsencode(folder / "old") + b"/caf\xe9.jpg", "wb") as fh:
        fh.write(b"\xff\xd8")
    (folder / "old" / "plain.jpg").write_bytes(b"\xff\xd8")
    r = env.a.post("/v1/jobs/tagging", json={"directory": str(folder / "old")})
    assert r.status_code == 201, r.text
    items = env.a.get(f"/v1/jobs/{r.json()['id']}/items").json()["data"]
    assert len(items) == 2
    odd = next(it for it in items if it["inputs"].get("name_not_utf8"))
    assert odd["ref"].endswith("caf\\xe9.jpg") and odd["inputs"]["images"] == [odd["ref"]]
    plain = next(it for it in items if not it["inputs"].get("name_not_utf8"))
    assert plain["ref"].endswith("plain.jpg")
    docs = env.a.post("/v1/jobs/documents", json={"pipeline": "summarize", "directory": str(folder / "old")})
    assert docs.status_code in (201, 422) and docs.status_code != 500  # no documents there: no_inputs, never 500


def test_inline_paths_are_stored_with_their_dots_folded(env: Tenancy) -> None:
    escaping = f"{env.root}/a/../../../etc/x.jpg"
    r = env.a.post("/v1/jobs/tagging", json={"items": [{"images": [escaping]}]})
    assert r.status_code == 422 and r.json()["code"] == "input_path_refused"  # confined at submit, as folders are
    climbing = f"{env.root}/a/old/../../a/x.jpg"
    r = env.a.post("/v1/jobs/tagging", json={"items": [{"images": [climbing, "data:image/png;base64,AA=="]}]})
    assert r.status_code == 201, r.text
    item = env.a.get(f"/v1/jobs/{r.json()['id']}/items").json()["data"][0]
    assert item["inputs"]["images"] == [os.path.normpath(climbing), "data:image/png;base64,AA=="]


def _batch_job(client: httpx.Client, settings: Settings) -> str:
    line = {
        "custom_id": "one",
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
    }
    upload = client.post(
        "/v1/files", data={"purpose": "batch"}, files={"file": ("in.jsonl", io.BytesIO(json.dumps(line).encode()))}
    )
    assert upload.status_code == 200, upload.text
    body = {"input_file_id": upload.json()["id"], "endpoint": "/v1/chat/completions", "completion_window": "24h"}
    batch = client.post("/v1/batches", json=body)
    assert batch.status_code == 200, batch.text
    engine = make_engine(settings.database.database_url)
    with make_sessionmaker(engine)() as s:
        row = s.get(Batch, batch.json()["id"])
        assert row is not None and row.job_id is not None
        job_id = row.job_id
    engine.dispose()
    return job_id


@pytest.mark.parametrize("action", ["cancel", "pause", "resume", "rerun"])
def test_a_batchs_job_is_not_driven_through_the_jobs_routes(module_env: Tenancy, action: str) -> None:
    env = module_env
    job_id = _batch_job(env.a, env.settings)
    body = {"scope": "all"} if action == "rerun" else None
    r = env.a.post(f"/v1/jobs/{job_id}/{action}", json=body)
    assert (r.status_code, r.json()["code"]) == (409, "batch_owned_job"), r.text
    assert "/v1/batches" in r.json()["detail"]
    assert env.a.get(f"/v1/jobs/{job_id}").json()["status"] in ("queued", "running")


@pytest.mark.parametrize("cursor", ["w: 5 ", "w:٣", "w:1_000", "w:+5", "w:5\n", "w:0x5", "w:-0"])
def test_a_results_cursor_is_w_and_ascii_digits_only(module_env: Tenancy, cursor: str) -> None:
    env = module_env
    job = env.a.post("/v1/jobs/tagging", json={"items": [{"images": [str(env.root / "a" / "photo.jpg")]}]}).json()
    r = env.a.get(f"/v1/jobs/{job['id']}/results", params={"cursor": cursor})
    assert (r.status_code, r.json()["code"]) == (422, "bad_cursor"), r.text
    assert env.a.get(f"/v1/jobs/{job['id']}/results", params={"cursor": "w:-1"}).status_code == 200
    assert env.a.get(f"/v1/jobs/{job['id']}/items", params={"cursor": " 5"}).status_code == 422

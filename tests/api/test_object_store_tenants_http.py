"""Object-store inputs per tenant, over real HTTP against an S3-compatible server on loopback (moto,
tests/support/s3.py), on SQLite and PostgreSQL: each tenant lists and reads only under its own prefixes (set by the
admin beside its local roots, inside ``VLBATCH_ALLOWED_S3_PREFIXES``), none without them when roots are required;
a refusal names no prefix of anyone's; the store's own error text (endpoints, IAM ARNs) never reaches the client."""

from __future__ import annotations

import io
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from PIL import Image
from sqlalchemy import select

from api.main import create_app
from engine.runtime.config import EngineConfig
from pipelines import image_tagging
from preprocessing import object_store
from preprocessing.input_errors import InputError
from tests.support.s3 import client, moto_server, s3_env
from tests.support.scripted import CHAT, scripted_runner
from tests.support.services import free_port
from vlbatch.db import job_store, tenants
from vlbatch.db.models import Item
from vlbatch.db.session import make_engine, make_sessionmaker, migrate
from vlbatch.settings import Settings
from worker.context import WorkerContext
from worker.feeder import Feeder

pytestmark = pytest.mark.timeout(120)
PREFIXES = ["s3://bucket-a", "s3://bucket-b", "s3://bucket-c/hidden-prefix"]


def _png(color: tuple[int, int, int]) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (56, 56), color).save(out, format="PNG")
    return out.getvalue()


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    with moto_server() as url:
        s3 = client(url)
        for bucket in ("bucket-a", "bucket-b", "bucket-c"):
            s3.create_bucket(Bucket=bucket)
        s3.put_object(Bucket="bucket-a", Key="photos/secret.png", Body=_png((200, 0, 0)))
        s3.put_object(Bucket="bucket-b", Key="photos/mine.png", Body=_png((0, 200, 0)))
        yield url


@pytest.fixture
def store(endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    for key, value in s3_env(endpoint).items():
        monkeypatch.setenv(key, value)
    object_store._client.cache_clear()
    yield endpoint
    object_store._client.cache_clear()


def _settings(db_url: str, redis_url: str, tmp_path: Path) -> Settings:
    root = tmp_path / "shared"
    for tenant in ("a", "b"):
        (root / tenant).mkdir(parents=True, exist_ok=True)
    settings = Settings(
        database_url=db_url,
        broker_url=redis_url,
        model_name="tiny",
        allowed_input_roots=[root],
        allowed_s3_prefixes=PREFIXES,
        tenant_roots_required=True,
    )
    migrate(db_url)
    with make_sessionmaker(make_engine(db_url))() as s:
        for tenant in ("a", "b"):
            tenants.set_roots(
                s, settings, tenant=tenant, inputs=[str(root / tenant)], s3_prefixes=[f"s3://bucket-{tenant}/photos"]
            )
        s.commit()
    return settings


def test_a_tenant_lists_only_its_own_prefixes_and_refusals_name_none(
    db_url: str, redis_url: str, tmp_path: Path, store: str, serve: type, api_key: type
) -> None:
    settings = _settings(db_url, redis_url, tmp_path)
    b, c = api_key.make(db_url, tenant="b"), api_key.make(db_url, tenant="c")  # c: no roots of its own
    with serve(create_app(settings)) as srv, httpx.Client(base_url=srv.url, timeout=30) as http:
        for dry_run in (True, False):
            own = http.post(
                "/v1/jobs/tagging",
                json={"directory": "s3://bucket-b/photos", "dry_run": dry_run},
                headers=api_key.header(b),
            )
            assert own.status_code == (200 if dry_run else 201), own.text
            assert (own.json()["items"] if dry_run else own.json()["total"]) == 1
            for who, folder in ((b, "s3://bucket-a/photos"), (b, "s3://bucket-c/hidden-prefix"), (c, "s3://bucket-b")):
                r = http.post(
                    "/v1/jobs/tagging", json={"directory": folder, "dry_run": dry_run}, headers=api_key.header(who)
                )
                assert r.status_code == 422 and r.json()["code"] == "input_path_refused", r.text
                shown = r.json()["detail"].replace(folder, "")  # the client's own address may be echoed
                assert not any(word in shown for word in ("bucket-", "hidden-prefix", "VLBATCH_ALLOWED")), shown
            # An inline object in another tenant's bucket is refused at submit too, naming no prefix; its own is
            # taken (nothing fetched: the worker reads it inside the same prefixes).
            for uri, code in (("s3://bucket-a/photos/secret.png", 422), ("s3://bucket-b/photos/mine.png", 200)):
                r = http.post(
                    "/v1/jobs/tagging",
                    json={"items": [{"images": [uri]}], "dry_run": dry_run},
                    headers=api_key.header(b),
                )
                assert r.status_code == (code if dry_run or code == 422 else 201), r.text
                if code == 422:
                    assert r.json()["code"] == "input_path_refused", r.text
                    assert "bucket-b" not in r.json()["detail"] and "hidden-prefix" not in r.json()["detail"]


def test_a_tenants_worker_reads_only_under_its_prefixes(
    db_url: str, redis_url: str, tmp_path: Path, store: str
) -> None:
    settings = _settings(db_url, redis_url, tmp_path)
    sessions = make_sessionmaker(make_engine(db_url))
    with sessions() as s:
        items = [
            job_store.NewItem({"images": [f"s3://{uri}"]})
            for uri in ("bucket-b/photos/mine.png", "bucket-a/photos/secret.png")
        ]
        job = job_store.create_job(
            s,
            pipeline=image_tagging.NAME,
            model="m",
            options=image_tagging.TaggingOptions(max_tags=3).model_dump(),
            items=items,
            chunk_size=10,
            tenant="b",
        )
        s.commit()
        chunk_ids = job_store.chunks_of(s, job_id=job.id)
    runner = scripted_runner([], [], EngineConfig(model="scripted", max_num_seqs=4))
    runner.load()
    ctx = WorkerContext(settings, sessions, runner, "m", CHAT, pool=ThreadPoolExecutor(2))
    feeder = Feeder(ctx)
    try:
        for cid in chunk_ids:
            feeder.add_chunk(cid)
        assert feeder.wait_idle(60)
    finally:
        feeder.close()
        runner.close()
    with sessions() as s:
        done = {i.inputs["images"][0]: i for i in s.scalars(select(Item).where(Item.job_id == job.id))}
    assert done["s3://bucket-b/photos/mine.png"].status == "succeeded"
    theirs = done["s3://bucket-a/photos/secret.png"]
    assert theirs.status == "failed" and theirs.error_code == "outside_roots"
    assert "bucket-b" not in (theirs.error_message or "") and "hidden-prefix" not in (theirs.error_message or "")


def test_the_stores_own_error_text_never_reaches_the_client(
    db_url: str, redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, serve: type, api_key: type
) -> None:
    dead = f"http://127.0.0.1:{free_port()}"  # an internal endpoint nobody answers on
    for key, value in s3_env(dead).items():
        monkeypatch.setenv(key, value)
    object_store._client.cache_clear()
    try:
        settings = _settings(db_url, redis_url, tmp_path)
        b = api_key.make(db_url, tenant="b")
        with serve(create_app(settings)) as srv, httpx.Client(base_url=srv.url, timeout=60) as http:
            r = http.post(
                "/v1/jobs/tagging",
                json={"directory": "s3://bucket-b/photos", "dry_run": True},
                headers=api_key.header(b),
            )
        assert r.status_code == 422 and r.json()["code"] == "input_path_refused", r.text
        assert dead.split("//")[1] not in r.text and "endpoint" not in r.text.lower(), r.text
        with pytest.raises(InputError) as err:
            object_store.read_object("s3://bucket-b/photos/mine.png", allowed=["s3://bucket-b"], max_bytes=1 << 20)
        assert err.value.code == "fetch_error" and dead.split("//")[1] not in str(err.value)
    finally:
        object_store._client.cache_clear()


def test_an_access_denied_names_no_arn() -> None:
    from botocore.exceptions import ClientError

    arn = "arn:aws:iam::123456789012:role/vlbatch-worker"
    denied = ClientError(
        {"Error": {"Code": "AccessDenied", "Message": f"User: {arn} is not authorized to perform: s3:GetObject"}},
        "GetObject",
    )
    failure = object_store._failure(denied, object_store.parse_object_uri("s3://bucket-b/photos/x.png"))
    assert failure.code == "fetch_error" and "AccessDenied" in str(failure) and arn not in str(failure)
    assert "123456789012" not in str(failure)

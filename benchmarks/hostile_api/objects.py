"""Hostile-client probes: object storage between tenants. An S3-compatible server on loopback (moto's server
mode, in this process) holds buckets ``tenant-a`` and ``tenant-b``; both are in ``VLBATCH_ALLOWED_S3_PREFIXES``,
each tenant has its own bucket as its prefix (``vlbatch keys roots --s3``, here through ``vlbatch.db.tenants``),
and ``VLBATCH_TENANT_ROOTS_REQUIRED`` is on. Tenant b names a's bucket as a folder and as an item; a refusal's
text is read for other tenants' prefixes; and with the store gone, the error is read for its endpoint."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from typing import Any

import httpx
from PIL import Image

from benchmarks.harness.children import free_port
from benchmarks.hostile_api import Row, Target, status_and_code
from preprocessing import object_store
from preprocessing.input_errors import InputError
from vlbatch.db import tenants
from vlbatch.db.session import make_engine, make_sessionmaker
from vlbatch.settings import Settings

PREFIXES = ["s3://tenant-a", "s3://tenant-b"]
_PORT = free_port()  # the store's: the API process is started with it before the store is
_STORE = {
    "AWS_ENDPOINT_URL": f"http://127.0.0.1:{_PORT}",
    "AWS_ACCESS_KEY_ID": "vlbatch-probe",
    "AWS_SECRET_ACCESS_KEY": "vlbatch-probe-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
}
ENV: dict[str, str] = {
    "VLBATCH_MODEL_NAME": "tiny",
    "VLBATCH_ALLOWED_S3_PREFIXES": ",".join(PREFIXES),
    "VLBATCH_TENANT_ROOTS_REQUIRED": "true",
    **_STORE,
}


def _got(r: httpx.Response) -> str:
    return status_and_code(r)


def _detail(r: httpx.Response) -> str:
    try:
        return str(r.json().get("detail", ""))
    except ValueError:
        return r.text


def _prepare(target: Target) -> Settings:
    for tenant in ("a", "b"):
        (target.root / tenant).mkdir()
    settings = Settings(
        database_url=f"sqlite:///{target.data_dir.parent / 'vlbatch.db'}",
        allowed_input_roots=[target.root],
        allowed_s3_prefixes=PREFIXES,
        tenant_roots_required=True,
    )
    engine = make_engine(settings.database.database_url)
    with make_sessionmaker(engine)() as s:
        for tenant in ("a", "b"):
            tenants.set_roots(
                s, settings, tenant=tenant, inputs=[str(target.root / tenant)], s3_prefixes=[f"s3://tenant-{tenant}"]
            )
        s.commit()
    engine.dispose()
    return settings


def _store() -> Any:
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # the store's request log is not the table
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=_PORT, verbose=False)
    server.start()
    import boto3

    s3 = boto3.client(
        "s3",
        endpoint_url=_STORE["AWS_ENDPOINT_URL"],
        aws_access_key_id=_STORE["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=_STORE["AWS_SECRET_ACCESS_KEY"],
        region_name=_STORE["AWS_DEFAULT_REGION"],
    )
    out = io.BytesIO()
    Image.new("RGB", (32, 32), (9, 9, 9)).save(out, format="PNG")
    for tenant in ("a", "b"):
        s3.create_bucket(Bucket=f"tenant-{tenant}")
        s3.put_object(Bucket=f"tenant-{tenant}", Key="private/photo.png", Body=out.getvalue())
    return server


def probes(target: Target) -> Iterator[Row]:
    settings = _prepare(target)
    server = _store()
    admin = {"Authorization": f"Bearer {target.admin_key}"}
    try:
        with httpx.Client(base_url=target.base, timeout=60, headers=target.headers("b")) as b:
            yield from _folders(b, admin)
        yield from _worker_read(settings)
    finally:
        server.stop()
    with httpx.Client(base_url=target.base, timeout=60, headers=target.headers("b")) as b:
        r = b.post("/v1/jobs/tagging", json={"directory": "s3://tenant-b/private", "dry_run": True})
        leaked = f"127.0.0.1:{_PORT}" in r.text or "amazonaws" in r.text or "arn:" in r.text
        yield Row(
            "L1 the store's own error text",
            "b: dry run of its own bucket, the store down",
            f"{_got(r)}: {_detail(r)[:90]}",
            r.status_code == 422 and not leaked,
        )


def _folders(b: httpx.Client, admin: dict[str, str]) -> Iterator[Row]:
    r = b.post("/v1/jobs/tagging", json={"directory": "s3://tenant-a/private", "dry_run": True})
    yield Row("H6 b lists a's bucket (dry run)", "b: directory=s3://tenant-a/private", _got(r), r.status_code == 422)
    r = b.post("/v1/jobs/tagging", json={"directory": "s3://tenant-a/private"})
    yield Row("H6 b's folder job in a's bucket", "b: directory=s3://tenant-a/private", _got(r), r.status_code == 422)
    shown = _detail(r).replace("s3://tenant-a/private", "")
    yield Row(
        "M4 a refusal names no tenant's prefix",
        "the refusal's detail, b's own address taken out",
        shown[:90],
        "tenant-" not in shown and "VLBATCH_ALLOWED_S3" not in shown,
    )
    r = b.post("/v1/jobs/tagging", json={"directory": "s3://tenant-b/private", "dry_run": True})
    yield Row("H6 b's own bucket still works", "b: directory=s3://tenant-b/private", _got(r), r.status_code == 200)
    r = b.post("/v1/jobs/tagging", json={"directory": "s3://tenant-b/private", "dry_run": True}, headers=admin)
    yield Row(
        "H6 a tenant without prefixes, roots required",
        "admin's tenant: directory=s3://tenant-b/private",
        _got(r),
        r.status_code == 422,
    )


def _worker_read(settings: Settings) -> Iterator[Row]:
    """The worker reads an item under the prefixes its job's tenant has (``worker.held_items.job_plan``):
    its read confines the object before it asks the store for it (``object_store.read_object``), so the check is
    the confinement."""
    engine = make_engine(settings.database.database_url)
    with make_sessionmaker(engine)() as s:
        allowed = tenants.roots_of(s, settings, "b").s3_prefixes
    engine.dispose()
    try:
        object_store.confine_object("s3://tenant-a/private/photo.png", allowed)
        got = "a's object allowed"
    except InputError as exc:
        got = str(exc)[:90]
    sent = "b: s3://tenant-a/private/photo.png"
    yield Row("H6 b's item in a's bucket, at the worker", sent, got, got.startswith("outside_roots"))

"""Hostile-client probes: tenancy, paths and queues. Tenants ``a`` and ``b`` get roots of their own below the
shared root (``vlbatch keys roots``, here through ``vlbatch.db.tenants``) and probe each other's folders, the
server's disk, the path spellings, a batch's job, the results cursor and the model check."""

from __future__ import annotations

import io
import ipaddress
import json
import os
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import httpx

from benchmarks.hostile_api import Row, Target, status_and_code
from jobs.publisher import queue_name
from preprocessing.addresses import AddressPolicy, forbidden_reason
from preprocessing.input_errors import InputError
from preprocessing.paths import confined_path
from vlbatch.db import tenants
from vlbatch.db.models import Batch, EngineSample, utcnow
from vlbatch.db.session import make_engine, make_sessionmaker
from vlbatch.settings import Settings

ENV: dict[str, str] = {"VLBATCH_MODEL_NAME": "tiny"}


def _db(target: Target) -> str:
    return f"sqlite:///{target.data_dir.parent / 'vlbatch.db'}"


def _prepare(target: Target) -> None:
    """Tenant a reads root/a and writes root/a-out; tenant b reads root/b; a live worker serves 'other' only."""
    for folder in ("a", "a-out", "b"):
        (target.root / folder).mkdir(exist_ok=True)
        (target.root / folder / "photo.jpg").write_bytes(b"\xff\xd8")
    (target.root / "b" / "secret.txt").write_text("b's")
    settings = Settings(database_url=_db(target), allowed_input_roots=[target.root])
    engine = make_engine(settings.database.database_url)
    with make_sessionmaker(engine)() as s:
        tenants.set_roots(
            s, settings, tenant="a", inputs=[str(target.root / "a")], outputs=[str(target.root / "a-out")]
        )
        tenants.set_roots(s, settings, tenant="b", inputs=[str(target.root / "b")])
        s.add(EngineSample(worker="probe-worker", model="other", sampled_at=utcnow() - timedelta(seconds=1)))
        s.commit()
    engine.dispose()


def _got(r: httpx.Response) -> str:
    return status_and_code(r)


def probes(target: Target) -> Iterator[Row]:
    _prepare(target)
    root = target.root
    with httpx.Client(base_url=target.base, timeout=30, headers=target.headers("a")) as a:
        yield from _roots(a, root)
        yield from _names_and_paths(a, root)
        yield from _jobs_routes(a, target)
    yield from _direct()


def _roots(a: httpx.Client, root: os.PathLike[str]) -> Iterator[Row]:
    r = a.post("/v1/jobs/tagging", json={"directory": f"{root}/b"})
    yield Row("D6 a tenant's folder job in another's root", "a: directory=<root>/b", _got(r), r.status_code == 422)
    doc = {"pipeline": "summarize", "items": [{"path": f"{root}/a-out/photo.jpg"}], "output_dir": f"{root}/b/out"}
    r = a.post("/v1/jobs/documents", json=doc)
    yield Row("D6 output_dir in another tenant's root", "a: output_dir=<root>/b/out", _got(r), r.status_code == 422)
    r = a.post("/v1/jobs/documents", json={"pipeline": "summarize", "items": [{"path": f"{root}/b/secret.txt"}]})
    yield Row("D6 inline document of another tenant", "a: path=<root>/b/secret.txt", _got(r), r.status_code == 422)
    r = a.post("/v1/jobs/tagging", json={"directory": f"{root}/a"})
    yield Row("D6 own root still works", "a: directory=<root>/a", _got(r), r.status_code == 201)
    r = a.post("/v1/jobs/tagging", json={"directory": "/etc"})
    detail = r.json().get("detail", "")
    leaked = str(root) in detail or "/a" in detail.replace("/etc", "")
    yield Row("D19 refusal lists no root", "a: directory=/etc", f"{_got(r)}, roots named: {leaked}", not leaked)
    answers = []
    for path in ("/etc/shadow", "/etc/none.jpg"):  # the worker's read of an item's file (preprocessing.paths)
        try:
            confined_path(path, [Path(root)])
            answers.append("read")
        except InputError as exc:
            answers.append(exc.code)
    same = answers[0] == answers[1]
    yield Row("D12 no existence oracle (worker read)", "/etc/shadow vs /etc/none.jpg", " vs ".join(answers), same)


def _names_and_paths(a: httpx.Client, root: os.PathLike[str]) -> Iterator[Row]:
    folder = os.fsencode(os.path.join(root, "a", "camera"))
    os.makedirs(folder, exist_ok=True)
    with open(folder + b"/caf\xe9.jpg", "wb") as fh:
        fh.write(b"\xff\xd8")
    with open(folder + b"/plain.jpg", "wb") as fh:
        fh.write(b"\xff\xd8")
    r = a.post("/v1/jobs/tagging", json={"directory": os.fsdecode(folder)})
    marked = 0
    if r.status_code == 201:
        items = a.get(f"/v1/jobs/{r.json()['id']}/items").json()["data"]
        marked = sum(bool(it["inputs"].get("name_not_utf8")) for it in items)
    yield Row("D8 non-UTF-8 file name in a folder", "caf\\xe9.jpg + plain.jpg", f"{_got(r)}, marked {marked}",
              r.status_code == 201 and marked == 1)  # fmt: skip
    escaping = f"{root}/a/../../../../etc/cron.d/x.jpg"
    r = a.post("/v1/jobs/tagging", json={"items": [{"images": [escaping]}]})
    yield Row("D14 inline path climbing out of the roots", "<root>/a/../../../../etc/cron.d/x.jpg", _got(r),
              _got(r) == "422 input_path_refused")  # fmt: skip
    climbing = f"{root}/a/old/../../a/x.jpg"
    r = a.post("/v1/jobs/tagging", json={"items": [{"images": [climbing]}]})
    stored = a.get(f"/v1/jobs/{r.json()['id']}/items").json()["data"][0]["inputs"]["images"][0] if r.is_success else ""
    yield Row("D14 inline path stored normalised", "<root>/a/old/../../a/x.jpg", stored,
              ".." not in stored and stored == os.path.normpath(climbing))  # fmt: skip


def _batch_job(a: httpx.Client, target: Target) -> str | None:
    line = {"custom_id": "1", "method": "POST", "url": "/v1/chat/completions",
            "body": {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}}  # fmt: skip
    up = a.post(
        "/v1/files", data={"purpose": "batch"}, files={"file": ("b.jsonl", io.BytesIO(json.dumps(line).encode()))}
    )
    if not up.is_success:
        return None
    body = {"input_file_id": up.json()["id"], "endpoint": "/v1/chat/completions", "completion_window": "24h"}
    batch = a.post("/v1/batches", json=body)
    if not batch.is_success:
        return None
    engine = make_engine(_db(target))
    with make_sessionmaker(engine)() as s:
        row = s.get(Batch, batch.json()["id"])
        job_id = row.job_id if row is not None else None
    engine.dispose()
    return job_id


def _jobs_routes(a: httpx.Client, target: Target) -> Iterator[Row]:
    job_id = _batch_job(a, target)
    got = []
    for action in ("cancel", "pause", "resume", "rerun"):
        r = a.post(f"/v1/jobs/{job_id}/{action}", json={"scope": "all"} if action == "rerun" else None)
        got.append(_got(r))
    ok = job_id is not None and all(g == "409 batch_owned_job" for g in got)
    yield Row("D23 batch's job via /v1/jobs", "cancel, pause, resume, rerun", ", ".join(sorted(set(got))), ok)
    job = a.post("/v1/jobs/tagging", json={"items": [{"images": [f"{target.root}/a/photo.jpg"]}]}).json()
    cursors = ["w: 5 ", "w:٣", "w:1_000", "w:+5", "w:0x5"]
    codes = {a.get(f"/v1/jobs/{job['id']}/results", params={"cursor": c}).status_code for c in cursors}
    yield Row("D24 loose results cursors", ", ".join(map(repr, cursors)), str(sorted(codes)), codes == {422})
    r = a.post("/v1/jobs/tagging", json={"model": "tiny", "items": [{"images": [f"{target.root}/a/photo.jpg"]}]})
    warnings = r.json().get("warnings", []) if r.is_success else []
    yield Row("Also: model no live worker serves", "model=tiny, live worker serves 'other'",
              f"{_got(r)}, warnings {len(warnings)}", r.status_code == 201 and len(warnings) == 1)  # fmt: skip


def _direct() -> Iterator[Row]:
    addresses = ["fec0::1", "192.0.0.8", "192.88.99.1", "3fff::1"]
    reasons = [forbidden_reason(ipaddress.ip_address(x), AddressPolicy()) for x in addresses]
    yield Row("D22 special-purpose addresses", ", ".join(addresses), "; ".join(map(str, reasons)), all(reasons))
    names = (queue_name("org/m", "batch"), queue_name("org_m", "batch"))
    yield Row("D25 queue names of org/m and org_m", "queue_name(org/m), queue_name(org_m)", " vs ".join(names),
              names[0] != names[1])  # fmt: skip

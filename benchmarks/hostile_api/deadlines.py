"""Hostile-client probes: deadlines, fair shares and what model names leave behind. Deadlines the database cannot
read back or already over; a tenant jumping the queue with an early deadline or with a stream of one-chunk jobs
(claims through ``vlbatch.db.claim_order`` on the simulated clock of ``benchmarks/claim_shares.py``); /metrics
labels and broker keys after many model names."""

from __future__ import annotations

import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy.orm import Session

from benchmarks.claim_shares import deadline_workload, one_chunk_workload
from benchmarks.hostile_api import Row, Target, status_and_code
from jobs.publisher import queue_name
from jobs.reconciler import reconcile_once
from vlbatch.db.models import utcnow
from vlbatch.db.session import make_engine, make_sessionmaker, migrate
from vlbatch.settings import Settings

ENV: dict[str, str] = {"VLBATCH_MODEL_NAME": "tiny"}
BROKER = "redis://127.0.0.1:6379/12"  # the runner's
MODEL_NAMES = 20


def _got(r: httpx.Response) -> str:
    return status_and_code(r)


def probes(target: Target) -> Iterator[Row]:
    (target.root / "album").mkdir()
    (target.root / "album" / "photo.jpg").write_bytes(b"\xff\xd8")
    admin = {"Authorization": f"Bearer {target.admin_key}"}
    with httpx.Client(base_url=target.base, timeout=30, headers=target.headers("a")) as a:
        yield from _deadlines(a, target, admin)
        yield from _labels(a, target, admin)
    yield from _shares()


def _deadlines(a: httpx.Client, target: Target, admin: dict[str, str]) -> Iterator[Row]:
    folder = str(target.root / "album")
    for what, deadline in (
        ("year 1 at +14:00 (1 BC in UTC)", "0001-01-01T00:00:00+14:00"),
        ("year 9999 at -14:00 (10000 AD in UTC)", "9999-12-31T23:59:59-14:00"),
        ("already over", "2001-01-01T00:00:00+00:00"),
    ):
        r = a.post("/v1/jobs/tagging", json={"directory": folder, "deadline": deadline})
        ok = r.status_code == 422 and r.json().get("code") == "invalid_request"
        yield Row(f"H5 deadline {what}", f"deadline={deadline}", _got(r), ok)
    soon = (utcnow() + timedelta(hours=1)).isoformat()
    good = a.post("/v1/jobs/tagging", json={"directory": folder, "deadline": soon})
    job = good.json().get("id", "")
    answers = [
        good.status_code,
        a.get(f"/v1/jobs/{job}").status_code,
        a.get("/v1/jobs").status_code,
        a.get("/v1/jobs", headers=admin).status_code,
        a.get("/metrics", headers=admin).status_code,
        a.post(f"/v1/jobs/{job}/cancel").status_code,
    ]
    yield Row(
        "H5 every route after them",
        "create, GET job, both lists, /metrics, cancel",
        "/".join(map(str, answers)),
        answers == [201, 200, 200, 200, 200, 200],
    )


def _share(workload: Callable[[Session, int], Counter[str | None]]) -> tuple[int, int]:
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'claims.db'}"
        migrate(url)
        engine = make_engine(url)
        with make_sessionmaker(engine)() as s:
            got = workload(s, 20)
        engine.dispose()
    return got["a"], sum(got.values())


def _shares() -> Iterator[Row]:
    a, total = _share(deadline_workload)
    sent = "a: deadlines a year past and a minute ahead; b: a 40-chunk job without one"
    yield Row("M1 an early or past deadline against another tenant", sent, f"a got {a} of {total} claims", a <= 12)
    a, total = _share(one_chunk_workload)
    sent = "a: a new one-chunk job before each claim; b: a 40-chunk job"
    yield Row("M2 many one-chunk jobs against another tenant", sent, f"a got {a} of {total} claims", a <= 12)


def _labels(a: httpx.Client, target: Target, admin: dict[str, str]) -> Iterator[Row]:
    folder = str(target.root / "album")
    stamp = time.monotonic_ns()
    made = []
    for n in range(MODEL_NAMES):
        r = a.post("/v1/jobs/tagging", json={"directory": folder, "model": f"probe-{stamp}-{n}"})
        made.append(r.json().get("id", ""))
    body = a.get("/metrics", headers=admin).text
    labels = {
        sample.labels["queue"]
        for family in text_string_to_metric_families(body)
        for sample in family.samples
        if "queue" in sample.labels
    }
    yield Row(
        "L6 /metrics queue labels after many model names",
        f"{MODEL_NAMES} jobs, each naming a model no worker serves",
        f"{len(labels)} queue labels: {', '.join(sorted(labels))}",
        len(labels) <= 2,
    )
    for job in made:
        a.post(f"/v1/jobs/{job}/cancel")
    database_url = f"sqlite:///{target.data_dir.parent / 'vlbatch.db'}"
    settings = Settings(database_url=database_url, broker_url=BROKER)
    engine = make_engine(database_url)
    try:
        reconcile_once(settings, make_sessionmaker(engine), stale_after=timedelta(seconds=30))
    finally:
        engine.dispose()
    import redis

    client = redis.Redis.from_url(BROKER)
    left = sum(len(client.keys(f"*{queue_name(f'probe-{stamp}-{n}', 'batch')}*")) for n in range(MODEL_NAMES))
    yield Row(
        "L6 broker keys of models whose jobs all ended",
        f"{MODEL_NAMES} such models' jobs cancelled, one reconciler pass",
        f"{left} keys left",
        left == 0,
    )

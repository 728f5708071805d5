"""Prints how the real API holds up under many submitters, and what a 1,000,000-item job costs it in memory.

Starts ``vlbatch api`` as its own process on a loopback port, over SQLite (a temporary file) or PostgreSQL (a
fresh database, dropped afterwards), publishing to the real Redis (db 13, under a model name of its own whose
queues are deleted afterwards). No worker runs, so every job stays queued. Then:

1. load: ``--submitters`` concurrent clients for ``--seconds``, each in a loop creating a small inline tagging
   job (1-3 images) and polling its status ``--polls`` times;
2. bulk: one ``--bulk-items`` job, either a folder of that many empty ``.jpg`` files (``--bulk directory``,
   the default: the API lists it, the DB gets the items and the broker the chunks) or inline items
   (``--bulk inline``, one JSON body), checked to be accepted with every item and its chunks on the broker.

The API process's resident memory is read from ``/proc/<pid>/status`` every 20 ms; the table shows requests,
errors and p50/p99 latency per kind, and the RSS at start and its peak in each phase. Traffic stays on
127.0.0.1; the run is bounded by ``--seconds`` plus one bulk job and a request timeout.

Usage: python benchmarks/api_load.py [--db sqlite|postgresql] [--submitters 200] [--seconds 60]
       [--polls 3] [--bulk-items 1000000] [--bulk directory|inline] [--workdir DIR] [--pg-admin URL]
       (quick look: --submitters 20 --seconds 5 --bulk-items 20000)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from benchmarks.harness.children import api_process, child_env
from jobs.publisher import queue_name

BROKER_URL = "redis://127.0.0.1:6379/13"
REQUEST_TIMEOUT_S = 60.0
BULK_TIMEOUT_S = 1800.0


@dataclass
class Latencies:
    """Request latencies (s) and failures of one kind of request."""

    seconds: list[float] = field(default_factory=list)
    errors: int = 0
    first_error: str = ""

    def fail(self, what: str) -> None:
        self.errors += 1
        self.first_error = self.first_error or what[:200]

    def quantile(self, q: float) -> float:
        ordered = sorted(self.seconds)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


# ------------------------------------------------------------------------------------ the API process


class RssSampler:
    """Samples a process's VmRSS; ``mark`` starts a new phase and returns the peak of the one before."""

    def __init__(self, pid: int, interval_s: float = 0.02) -> None:
        self.pid = pid
        self.interval_s = interval_s
        self.peak_kb = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def rss_kb(self) -> int:
        try:
            with open(f"/proc/{self.pid}/status") as fh:
                for line in fh:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1])
        except OSError:
            pass
        return 0

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.peak_kb = max(self.peak_kb, self.rss_kb())

    def start(self) -> None:
        self.peak_kb = self.rss_kb()
        self._thread.start()

    def mark(self) -> int:
        peak, self.peak_kb = max(self.peak_kb, self.rss_kb()), self.rss_kb()
        return peak

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def api_settings(database_url: str, model: str, root: Path, bulk_items: int) -> dict[str, str]:
    """The API process's settings: no worker, one tenant, and room for the bulk job."""
    return {
        "VLBATCH_DATABASE_URL": database_url,
        "VLBATCH_BROKER_URL": BROKER_URL,
        "VLBATCH_MODEL_NAME": model,
        "VLBATCH_ALLOWED_INPUT_ROOTS": str(root),
        "VLBATCH_MAX_ITEMS_PER_JOB": str(max(bulk_items, 1000)),
        # One tenant submits everything here; the load is the point, not the quota that would stop it.
        "VLBATCH_AUTH": "off",
        "VLBATCH_TENANT_MAX_ACTIVE_JOBS": "1000000000",
        "VLBATCH_TENANT_MAX_ITEMS_PER_JOB": str(max(bulk_items, 1000)),
        # Room for --bulk inline's one JSON body (under 256 bytes an item).
        "VLBATCH_MAX_REQUEST_BYTES": str(256 * bulk_items + 1024 * 1024),
    }


def drop_queues(model: str) -> None:
    import redis

    client = redis.Redis.from_url(BROKER_URL)
    for kind in ("interactive", "batch", "documents"):
        q = queue_name(model, kind)
        client.delete(q, f"_kombu.binding.{q}", f"_kombu.binding_permanent.{q}")


def queued_messages(model: str) -> int:
    import redis

    client = redis.Redis.from_url(BROKER_URL)
    return sum(int(client.llen(queue_name(model, kind))) for kind in ("interactive", "batch", "documents"))


# --------------------------------------------------------------------------------------------- load


async def _submitter(
    client: httpx.AsyncClient, k: int, until: float, polls: int, root: Path, create: Latencies, status: Latencies
) -> None:
    n = 0
    while time.monotonic() < until:
        n += 1
        images = [f"{root}/album/s{k:03d}/{n:06d}-{i}.jpg" for i in range(1 + n % 3)]
        body = {"items": [{"images": images, "ref": f"{k}-{n}"}], "priority": "interactive"}
        t0 = time.perf_counter()
        try:
            r = await client.post("/v1/jobs/tagging", json=body)
        except httpx.HTTPError as exc:
            create.fail(f"{type(exc).__name__}: {exc}")
            continue
        if r.status_code != 201:
            create.fail(f"HTTP {r.status_code}: {r.text}")
            continue
        create.seconds.append(time.perf_counter() - t0)
        job_id = r.json()["id"]
        for _ in range(polls):
            t0 = time.perf_counter()
            try:
                r = await client.get(f"/v1/jobs/{job_id}")
            except httpx.HTTPError as exc:
                status.fail(f"{type(exc).__name__}: {exc}")
                continue
            if r.status_code != 200:
                status.fail(f"HTTP {r.status_code}: {r.text}")
                continue
            status.seconds.append(time.perf_counter() - t0)


async def load(
    base: str, submitters: int, seconds: float, polls: int, root: Path
) -> tuple[Latencies, Latencies, float]:
    create, status = Latencies(), Latencies()
    limits = httpx.Limits(max_connections=submitters, max_keepalive_connections=submitters)
    async with httpx.AsyncClient(base_url=base, timeout=REQUEST_TIMEOUT_S, limits=limits) as client:
        # One job first, so the API's lazy set-up (broker connection, first queries) is not in the figures.
        warm = await client.post("/v1/jobs/tagging", json={"items": [{"images": [f"{root}/album/warm.jpg"]}]})
        await client.get(f"/v1/jobs/{warm.json()['id']}")
        start = time.monotonic()
        until = start + seconds
        await asyncio.gather(*(_submitter(client, k, until, polls, root, create, status) for k in range(submitters)))
        return create, status, time.monotonic() - start


# --------------------------------------------------------------------------------------------- bulk


def make_files(folder: Path, n: int) -> None:
    """``n`` empty ``.jpg`` files in subfolders of 1000, kept for the next run (a marker records the count)."""
    marker = folder / ".count"
    if marker.exists() and marker.read_text() == str(n):
        return
    shutil.rmtree(folder, ignore_errors=True)
    for i in range(n):
        if i % 1000 == 0:
            sub = folder / f"d{i // 1000:04d}"
            sub.mkdir(parents=True)
        (sub / f"{i:07d}.jpg").touch()
    marker.write_text(str(n))


def bulk(base: str, mode: str, n: int, root: Path) -> tuple[float, dict[str, Any]]:
    """Seconds to accept one ``n``-item job, and the job as the API reports it afterwards."""
    if mode == "directory":
        folder = root / "bulk"
        make_files(folder, n)
        content = json.dumps({"directory": str(folder), "recursive": True}).encode()
    else:
        items = [{"images": [f"{root}/album/bulk/{i:07d}.jpg"], "ref": f"b{i}"} for i in range(n)]
        content = json.dumps({"items": items}).encode()  # built before the clock starts
    with httpx.Client(base_url=base, timeout=BULK_TIMEOUT_S) as client:
        t0 = time.perf_counter()
        r = client.post("/v1/jobs/tagging", content=content, headers={"content-type": "application/json"})
        elapsed = time.perf_counter() - t0
        if r.status_code != 201:
            raise RuntimeError(f"bulk job refused: HTTP {r.status_code} {r.text[:500]}")
        job = client.get(f"/v1/jobs/{r.json()['id']}").json()
    if job["total"] != n:
        raise RuntimeError(f"bulk job holds {job['total']} items, expected {n}")
    return elapsed, job


# -------------------------------------------------------------------------------------------- report


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:,.1f}"


def report(
    db: str, args: argparse.Namespace, create: Latencies, status: Latencies, wall: float, rss: dict[str, int]
) -> None:
    print(f"\nAPI load on {db}: {args.submitters} submitters for {wall:.1f} s, {args.polls} status polls per job")
    print(f"| {'request':<8} | {'requests':>9} | {'errors':>6} | {'req/s':>7} | {'p50 ms':>8} | {'p99 ms':>8} |")
    print(f"|{'-' * 10}|{'-' * 11}|{'-' * 8}|{'-' * 9}|{'-' * 10}|{'-' * 10}|")
    for name, lat in (("create", create), ("status", status)):
        count = len(lat.seconds)
        p50, p99 = _ms(lat.quantile(0.5)), _ms(lat.quantile(0.99))
        print(f"| {name:<8} | {count:>9,} | {lat.errors:>6,} | {count / wall:>7,.1f} | {p50:>8} | {p99:>8} |")
    for name, lat in (("create", create), ("status", status)):
        if lat.first_error:
            print(f"first {name} error: {lat.first_error}")
    print("\nAPI process resident memory (VmRSS, /proc)")
    for phase, kb in rss.items():
        print(f"  {phase:<28} {kb / 1024:>8,.0f} MB")


def run(db: str, database_url: str, args: argparse.Namespace, root: Path) -> None:
    model = f"apiload-{uuid.uuid4().hex[:8]}"
    rss: dict[str, int] = {}
    try:
        env = child_env(api_settings(database_url, model, root, args.bulk_items))
        with api_process(env, root / "api.log") as api:
            sampler = RssSampler(api.pid)
            sampler.start()
            rss["at start"] = sampler.rss_kb()
            create, status, wall = asyncio.run(load(api.base, args.submitters, args.seconds, args.polls, root))
            rss["peak under load"] = sampler.mark()
            if args.bulk_items:
                before = queued_messages(model)
                accept, job = bulk(api.base, args.bulk, args.bulk_items, root)
                rss[f"peak accepting {args.bulk_items:,} items"] = sampler.mark()
                rss["after the bulk job"] = sampler.rss_kb()
                messages = queued_messages(model) - before
            sampler.stop()
        report(db, args, create, status, wall, rss)
        if args.bulk_items:
            print(
                f"\nbulk job ({args.bulk}): {job['total']:,} items accepted in {accept:.1f} s, status {job['status']}; "
                f"{messages:,} chunk messages of it on the broker (VLBATCH_CHUNK_SIZE items each)"
            )
    finally:
        drop_queues(model)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--db", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument("--submitters", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--polls", type=int, default=3, help="status requests after each create")
    parser.add_argument("--bulk-items", type=int, default=1_000_000, help="0 skips the bulk job")
    parser.add_argument("--bulk", choices=["directory", "inline"], default="directory")
    parser.add_argument("--workdir", type=Path, default=None, help="keeps the bulk folder between runs")
    parser.add_argument("--pg-admin", default="postgresql://127.0.0.1:5432/test")
    args = parser.parse_args()
    if args.submitters < 1 or args.seconds <= 0 or args.seconds > 600:
        parser.error("--submitters must be >= 1 and --seconds in (0, 600]")
    with tempfile.TemporaryDirectory(prefix="vlbatch-api-load-") as tmp:
        root = (args.workdir or Path(tmp)).resolve()
        root.mkdir(parents=True, exist_ok=True)
        if args.db == "sqlite":
            run("SQLite", f"sqlite:///{Path(tmp) / 'load.db'}", args, root)
            return
        import psycopg

        name = f"vlbatch_load_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(args.pg_admin, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
            try:
                base = args.pg_admin.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://")
                run("PostgreSQL", f"{base}/{name}", args, root)
            finally:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


if __name__ == "__main__":
    main()

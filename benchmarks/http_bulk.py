"""Prints how long the real API takes to accept a large job and to stream its results over HTTP.

For SQLite (a temporary file) and PostgreSQL (a fresh database, dropped afterwards) it starts the API app
under uvicorn on a loopback port, POSTs an N-item inline tagging job (and a job over a folder of N files),
fills a result for every item straight in the DB, then reads ``GET /v1/jobs/{id}/results.jsonl`` to the end.
Chunks are published to the real Redis broker (db 13); the benchmark deletes its queue afterwards.

Usage: python benchmarks/http_bulk.py [N] [PG_ADMIN_URL] [--no-directory]   (``--help`` says more)
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from sqlalchemy import JSON, Integer, String, Text, insert, literal, select, update

from api.main import create_app
from benchmarks.harness.children import free_port
from jobs.publisher import queue_name
from vlbatch.db.keys import issue_key
from vlbatch.db.models import Item, ItemStatus, Job, JobStatus, Result, utcnow
from vlbatch.db.session import make_engine
from vlbatch.settings import Settings

BROKER_URL = "redis://127.0.0.1:6379/13"
MODEL = "bench"
OUTPUT = {"tags": ["beach", "sunset", "people", "sea", "sky"], "caption": "Two people walk along a beach at sunset."}


@contextmanager
def serve(settings: Settings) -> Iterator[str]:
    """The API app under uvicorn in a thread; yields its base URL."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("API server did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)


def fill_results(url: str, job_id: str) -> None:
    """A result for every item of the job and the items succeeded, in two set-based statements."""
    engine = make_engine(url)
    cols = select(
        Item.id,
        Item.job_id,
        literal(OUTPUT, JSON),
        literal(json.dumps(OUTPUT), Text),
        literal(1234, Integer),
        literal(56, Integer),
        literal(MODEL, String),
        literal("1", String),
        literal("0" * 64, String),
        literal(utcnow()),
    ).where(Item.job_id == job_id)
    names = [
        "item_id",
        "job_id",
        "output",
        "raw_text",
        "prompt_tokens",
        "completion_tokens",
        "model",
        "pipeline_version",
        "options_hash",
        "created_at",
    ]
    with engine.begin() as conn:
        conn.execute(insert(Result).from_select(names, cols))
        conn.execute(update(Item).where(Item.job_id == job_id).values(status=ItemStatus.SUCCEEDED))
        conn.execute(update(Job).where(Job.id == job_id).values(status=JobStatus.FINISHED, finished_at=utcnow()))
    engine.dispose()


def post_job(client: httpx.Client, body: dict[str, Any]) -> tuple[str, float]:
    content = json.dumps(body).encode()  # built outside the timing
    t0 = time.perf_counter()
    r = client.post("/v1/jobs/tagging", content=content, headers={"content-type": "application/json"})
    dt = time.perf_counter() - t0
    if r.status_code != 201:
        raise RuntimeError(f"POST failed: {r.status_code} {r.text[:500]}")
    return str(r.json()["id"]), dt


def export(client: httpx.Client, job_id: str, n: int) -> float:
    t0 = time.perf_counter()
    rows, last = 0, ""
    with client.stream("GET", f"/v1/jobs/{job_id}/results.jsonl") as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if line:
                rows += 1
                last = line
    dt = time.perf_counter() - t0
    if rows != n or json.loads(last)["seq"] != n - 1:
        raise RuntimeError(f"export returned {rows} rows, expected {n}")
    return dt


def make_files(folder: Path, n: int) -> None:
    """N empty image files in subfolders of 1000 (created outside the timing)."""
    for i in range(n):
        sub = folder / f"d{i // 1000:04d}"
        if i % 1000 == 0:
            sub.mkdir(parents=True)
        (sub / f"{i:07d}.jpg").touch()


def run(name: str, url: str, n: int, root: Path, directory: bool) -> None:
    settings = Settings(database_url=url, broker_url=BROKER_URL, model_name=MODEL, allowed_input_roots=[root])
    items = [{"images": [f"{root}/album/{i:07d}.jpg"], "ref": f"r{i}"} for i in range(n)]
    headers = {"Authorization": f"Bearer {issue_key(url, tenant='bench')}"}
    with serve(settings) as base, httpx.Client(base_url=base, timeout=600, headers=headers) as client:
        job_id, accept = post_job(client, {"items": items})
        fill_results(url, job_id)
        dt = export(client, job_id, n)
        print(
            f"{name}: accept {n} items over HTTP in {accept:.2f} s; "
            f"export {n} rows in {dt:.2f} s = {n / dt:,.0f} rows/s",
            flush=True,
        )
        if directory:
            folder = root / "album"
            if not folder.exists():
                make_files(folder, n)
            _, dt = post_job(client, {"directory": str(folder)})
            print(f"{name}: accept a folder of {n} files over HTTP in {dt:.2f} s", flush=True)


def drop_queue() -> None:
    import redis

    q = queue_name(MODEL, "batch")
    redis.Redis.from_url(BROKER_URL).delete(q, f"_kombu.binding.{q}", f"_kombu.binding_permanent.{q}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], prog="python benchmarks/http_bulk.py")
    parser.add_argument("n", nargs="?", type=int, default=100_000, help="items per job (default: %(default)s)")
    parser.add_argument(
        "pg_admin",
        nargs="?",
        default="postgresql://127.0.0.1:5432/test",
        help="a PostgreSQL database to create the benchmark's own database from (default: %(default)s)",
    )
    parser.add_argument("--no-directory", action="store_true", help="skip the job over a folder of N files")
    args = parser.parse_args()
    n, pg_admin, directory = args.n, args.pg_admin, not args.no_directory
    with tempfile.TemporaryDirectory(prefix="vlbatch-http-bulk-") as tmp:
        root = Path(tmp)
        try:
            run("sqlite", f"sqlite:///{root / 'bench.db'}", n, root, directory)

            import psycopg

            name = f"vlbatch_http_{uuid.uuid4().hex[:8]}"
            with psycopg.connect(pg_admin, autocommit=True) as admin:
                admin.execute(f'CREATE DATABASE "{name}"')
                try:
                    base = pg_admin.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://")
                    run("postgresql", f"{base}/{name}", n, root, directory)
                finally:
                    admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            drop_queue()


if __name__ == "__main__":
    main()

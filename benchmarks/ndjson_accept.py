"""Prints what accepting an NDJSON job of N item lines costs the API process, per line: the route's own code
(``api.ndjson_jobs.create_from_lines``: lines read, checked, confined, stored, chunks published) in this process,
without HTTP, on a fresh database; seconds, and the CPU seconds of the whole process (every thread: the batch being
written is on a thread of its own) per line, which a loaded machine changes far less than it changes the seconds.
``--profile`` adds cProfile's top functions of the request's thread by cumulative time.

Usage (``benchmarks/scale.py`` times the same route over HTTP, with the API's RSS):

    python -m benchmarks.ndjson_accept --lines 100000 \
        --postgresql postgresql+psycopg://postgres@127.0.0.1:5432/postgres --broker-url redis://127.0.0.1:6380/60

The paths are in the run's input root, none of them there: each line is confined (one ``lstat``), as a client's
upload named ahead of its files is.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
from anyio import to_thread
from starlette.requests import Request

from api.deps import Principal
from api.ndjson_jobs import create_from_lines
from benchmarks.scale import database
from jobs import publisher
from vlbatch.db.session import make_engine, make_sessionmaker, migrate
from vlbatch.settings import Settings

NETWORK_CHUNK = 64 * 1024  # what the server hands the route at a time


def body(root: Path, n: int) -> Iterator[bytes]:
    """The upload: the head, then ``n`` item lines, in network-sized chunks."""
    lines = [json.dumps({"pipeline": "image_tagging", "options": {"max_tags": 10}})]
    lines += [f'{{"images": ["{root}/n{k:07d}.jpg"], "ref": "r{k}"}}' for k in range(n)]
    data = ("\n".join(lines) + "\n").encode()
    return (data[k : k + NETWORK_CHUNK] for k in range(0, len(data), NETWORK_CHUNK))


def request_of(chunks: Iterator[bytes]) -> Request:
    async def receive() -> dict[str, Any]:
        chunk = next(chunks, b"")
        return {"type": "http.request", "body": chunk, "more_body": bool(chunk)}

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v1/jobs/ndjson",
        "headers": [(b"content-type", b"application/x-ndjson")],
        "query_string": b"",
        "scheme": "http",
        "server": ("127.0.0.1", 80),
        "root_path": "",
    }
    return Request(scope, receive)


def run(url: str, broker_url: str, n: int, work: Path, *, profile: bool) -> None:
    root = work / "inputs"
    root.mkdir()
    migrate(url)
    settings = Settings(
        database_url=url, broker_url=broker_url, model_name="tiny", allowed_input_roots=[root], max_items_per_job=2 * n
    )
    engine = make_engine(url)
    principal = Principal(tenant="bench", is_admin=False, key_id=None)
    request = request_of(body(root, n))
    profiler = cProfile.Profile() if profile else None

    def accept() -> tuple[float, float]:
        with make_sessionmaker(engine)() as session:
            start, cpu = time.perf_counter(), time.process_time()
            if profiler is not None:
                profiler.enable()
            job = create_from_lines(session, settings, principal, request=request, key=None)
            if profiler is not None:
                profiler.disable()
            seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu
        assert job.total == n, job
        return seconds, cpu_seconds

    async def in_a_worker_thread() -> tuple[float, float]:  # as a sync route runs
        return await to_thread.run_sync(accept)

    try:
        seconds, cpu_seconds = anyio.run(in_a_worker_thread)
    finally:
        publisher.drop_queues(settings, queues=[("tiny", "batch")])
        engine.dispose()
    print(
        f"{n} lines: {seconds:.2f} s ({n / seconds:,.0f} lines/s), process CPU {cpu_seconds:.2f} s "
        f"({cpu_seconds / n * 1e6:.1f} us a line)"
    )
    if profiler is not None:
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(30)
        print(out.getvalue())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], prog="python -m benchmarks.ndjson_accept")
    parser.add_argument("--lines", type=int, default=100_000, help="item lines (default: %(default)s)")
    parser.add_argument("--postgresql", help="a PostgreSQL server database URL (a run database is made beside it)")
    parser.add_argument("--broker-url", default="redis://127.0.0.1:6379/12", help="where the chunks are published")
    parser.add_argument("--profile", action="store_true", help="also print cProfile's top functions")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        kind = "postgresql" if args.postgresql else "sqlite"
        with database(kind, args.postgresql, Path(tmp)) as url:
            run(url, args.broker_url, args.lines, Path(tmp), profile=args.profile)


if __name__ == "__main__":
    main()

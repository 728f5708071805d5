"""Prints what the outcome writer costs per item: wall and CPU time of ``write_outcomes`` batches, with the DB
server's CPU beside them when it runs on this host (PostgreSQL's backends, from /proc), so waiting for a core
is told apart from work. The feeder's writer does exactly this: a batch of tagging answers of running items,
one transaction, every ``--batch`` items.

Usage: python benchmarks/outcome_writer.py DATABASE_URL [--items N] [--batch B] [--busy] [--profile]

``--busy`` runs a pure-Python thread beside the writer, as the feeder's preparing threads are; ``--profile``
prints the writer thread's top functions by cumulative time.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import threading
import time
from pathlib import Path

from sqlalchemy import text, update

from jobs.request import JobRequest
from jobs.submit import submit
from vlbatch.db import job_store, outcomes
from vlbatch.db.models import Item, ItemStatus
from vlbatch.db.session import make_engine, make_sessionmaker, migrate
from vlbatch.settings import Settings

TAGS = ["beach", "sunset", "people", "sea", "sky"]


def _server_cpu_s() -> float | None:
    """CPU seconds of every PostgreSQL process on this host (None when there are none to read)."""
    tick = 100.0
    total, seen = 0.0, False
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)
            name = fields[0].split("(", 1)[1]
            if not name.startswith("postgres"):
                continue
            parts = fields[1].split()
            total += (int(parts[11]) + int(parts[12])) / tick
            seen = True
        except (OSError, IndexError, ValueError):
            continue
    return total if seen else None


def _busy(stop: threading.Event) -> None:
    while not stop.is_set():
        sum(i * i for i in range(2000))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("--items", type=int, default=4000)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--busy", action="store_true")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    migrate(args.url)
    sessions = make_sessionmaker(make_engine(args.url))
    items = [job_store.NewItem(inputs={"images": [f"/album/{i:07d}.jpg"]}, ref=str(i)) for i in range(args.items)]
    settings = Settings(database_url=args.url, max_items_per_job=max(args.items, 1))
    with sessions() as s:
        job = submit(
            s,
            settings,
            JobRequest(pipeline="image_tagging", options={}, items=items, model="m"),
            publish=False,
            admit=False,
        )
        job_id = job.id
        s.execute(update(Item).where(Item.job_id == job_id).values(status=ItemStatus.RUNNING))
        ids = list(s.scalars(text("SELECT id FROM items WHERE job_id = :j ORDER BY id"), {"j": job_id}))
        s.commit()
    marker = outcomes.Marker(model="m", model_revision=None, pipeline_version="1", options_hash="x")
    stop = threading.Event()
    busy = threading.Thread(target=_busy, args=(stop,), daemon=True)
    if args.busy:
        busy.start()
    profiler = cProfile.Profile() if args.profile else None
    wall = cpu = 0.0
    server0 = _server_cpu_s()
    for start in range(0, len(ids), args.batch):
        batch = [
            outcomes.Outcome(
                item_id=i,
                job_id=job_id,
                output={"tags": TAGS, "caption": None},
                raw_text='{"tags":[]}',
                prompt_tokens=120,
                completion_tokens=24,
                content_hash=f"{i:064x}",
            )
            for i in ids[start : start + args.batch]
        ]
        t0, c0 = time.perf_counter(), time.thread_time()
        if profiler:
            profiler.enable()
        outcomes.write_outcomes(sessions, outcomes=batch, markers={job_id: marker}, moved=set())
        if profiler:
            profiler.disable()
        wall += time.perf_counter() - t0
        cpu += time.thread_time() - c0
    server1 = _server_cpu_s()
    stop.set()
    n = len(ids)
    server = f"{1000 * (server1 - server0) / n:.2f}" if server0 is not None and server1 is not None else "-"
    print(
        f"{args.url.split(':')[0]}: {n} items in batches of {args.batch}{' beside a busy thread' if args.busy else ''}"
    )
    print(
        f"  wall {1000 * wall / n:.2f} ms/item   writer CPU {1000 * cpu / n:.2f} ms/item   server CPU {server} ms/item"
    )
    if profiler:
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)


if __name__ == "__main__":
    main()

"""Prints what the engine worker's database work costs per item, on the real feeder with the stub engine: round
trips per item on the writer thread (results and chunk finishes) and on the claiming threads, and the feeder's own
``db_seconds`` and ``db_cpu_seconds`` per item (what ``vlbatch bench`` reports as DB ms/item and DB CPU ms/item) and
its ``claim_seconds`` per item (claim ms/item).

Round trips are counted at the driver (every wait of psycopg's connection for the server: a statement, a BEGIN, a
COMMIT, a pool's pre-ping), so they do not depend on the machine's load; the times do (compare them under the same
conditions). The job is ``--items`` small photos in chunks of ``--chunk``, claimed in queue order from
``--threads`` task threads as the Celery worker does; ``--step-s`` slows the stub engine's steps (the default
answers as fast as the feeder prepares).

Usage: python benchmarks/feeder_writes.py POSTGRES_URL [--items N] [--chunk C] [--threads T] [--busy]
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import psycopg
from PIL import Image

from engine.runtime.chat import ChatTemplate
from engine.runtime.config import EngineConfig
from engine.runtime.runner import EngineRunner
from jobs.request import JobRequest
from jobs.submit import submit
from pipelines import image_tagging
from vlbatch.db import job_store
from vlbatch.db.models import Job
from vlbatch.db.session import make_engine, make_sessionmaker, migrate
from vlbatch.settings import Settings
from worker.context import WorkerContext
from worker.feeder import Feeder
from worker.samples import FeederStats

ROUND_TRIPS: Counter[str] = Counter()
SECONDS: dict[str, float] = defaultdict(float)  # the feeder's db_seconds and db_cpu_seconds, by thread role


def _role() -> str:
    name = threading.current_thread().name
    return "writer" if name == "feeder-writer" else "claims" if name.startswith("task") else "other"


def _count_round_trips() -> None:
    """Count every wait of a psycopg connection that went to the server, by the waiting thread's role (a wait whose
    generator finishes without asking for the socket, as setting autocommit does, is not one)."""
    wait = psycopg.Connection.wait

    def tracked(gen: Any) -> Any:
        try:
            step = gen.send(None)
        except StopIteration as end:
            return end.value
        ROUND_TRIPS[_role()] += 1
        while True:
            try:
                ready = yield step
            except BaseException as exc:  # passed on, as the generator's own driver would
                try:
                    step = gen.throw(exc)
                except StopIteration as end:
                    return end.value
                continue
            try:
                step = gen.send(ready)
            except StopIteration as end:
                return end.value

    def counted(self: Any, gen: Any, *args: Any, **kwargs: Any) -> Any:
        return wait(self, tracked(gen), *args, **kwargs)

    psycopg.Connection.wait = counted  # type: ignore[method-assign]


def _by_role(seconds: float, cpu_seconds: float) -> None:
    SECONDS[_role()] += seconds
    SECONDS[_role() + " cpu"] += cpu_seconds


def _split_db_time(stats: FeederStats) -> None:
    add_db, add_claim = stats.add_db, stats.add_claim

    def split(seconds: float, items: int = 0, cpu_seconds: float = 0.0) -> None:
        ROUND_TRIPS["batches"] += bool(items)
        _by_role(seconds, cpu_seconds)
        add_db(seconds, items, cpu_seconds)

    def split_claim(seconds: float, cpu_seconds: float) -> None:
        _by_role(seconds, cpu_seconds)
        add_claim(seconds, cpu_seconds)

    stats.add_db = split  # type: ignore[method-assign]
    stats.add_claim = split_claim  # type: ignore[method-assign]


def _busy(stop: threading.Event) -> None:
    while not stop.is_set():
        sum(i * i for i in range(2000))


def _photos(folder: Path, n: int) -> list[str]:
    paths = []
    for i in range(n):
        path = folder / f"{i:06d}.png"
        Image.new("RGB", (48, 32), (i % 256, (i // 256) % 256, 90)).save(path)
        paths.append(str(path))
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--chunk", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--step-s", type=float, default=0.0)
    parser.add_argument("--busy", action="store_true")
    args = parser.parse_args()
    migrate(args.url)
    sessions = make_sessionmaker(make_engine(args.url))
    with tempfile.TemporaryDirectory(prefix="vlbatch-feeder-writes-") as tmp:
        album = Path(tmp)
        paths = _photos(album, args.items)
        settings = Settings(
            database_url=args.url,
            allowed_input_roots=[album],
            max_items_per_job=max(args.items, 1),
            chunk_size=args.chunk,
        )
        with sessions() as s:
            job = submit(
                s,
                settings,
                JobRequest(
                    pipeline=image_tagging.NAME,
                    options=image_tagging.TaggingOptions(max_tags=3).model_dump(),
                    items=job_store.items_from_paths(paths, images_per_prompt=1),
                    model="m",
                ),
                publish=False,
                admit=False,
            )
            job_id = job.id
            chunks = job_store.chunks_of(s, job_id=job_id)
        config = EngineConfig.model_validate({"model": "stub", "backend": "stub", "stub": {"step_s": args.step_s}})
        runner = EngineRunner(config)
        runner.load()
        chat = ChatTemplate(lambda messages: "".join(str(m["content"]) for m in messages), source="bench")
        ctx = WorkerContext(settings=settings, sessions=sessions, runner=runner, model_name="m", chat=chat)
        feeder = Feeder(ctx, in_queue_order=True)
        stop = threading.Event()
        if args.busy:
            threading.Thread(target=_busy, args=(stop,), daemon=True).start()
        _count_round_trips()
        _split_db_time(feeder.stats)
        todo = list(chunks)
        lock = threading.Lock()

        def tasks() -> None:  # Celery's task threads: each delivered chunk id is a turn to claim
            while True:
                with lock:
                    if not todo:
                        return
                    delivered = todo.pop(0)
                feeder.add_chunk(delivered)

        started = time.perf_counter()
        threads = [threading.Thread(target=tasks, name=f"task-{k}") for k in range(args.threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        feeder.wait_idle()
        with sessions() as s:
            finished = s.get(Job, job_id)
            ended = finished is not None and finished.finished_at is not None
        seconds = time.perf_counter() - started
        stop.set()
        feeder.close()
        runner.close()
    st = feeder.stats
    n, per_chunk = st.db_items, len(chunks)
    print(
        f"{args.items} items in chunks of {args.chunk}, {args.threads} task threads"
        f"{', beside a busy thread' if args.busy else ''}: {seconds:.1f} s, job finished: {ended}"
    )
    for role in ("writer", "claims"):
        print(
            f"  {role:<6}: {ROUND_TRIPS[role] / n:.3f} round trips/item ({ROUND_TRIPS[role] / per_chunk:.2f}/chunk)"
            f"   wall {1000 * SECONDS[role] / n:.2f} ms/item   CPU {1000 * SECONDS[role + ' cpu'] / n:.2f} ms/item"
        )
    print(
        f"  feeder: DB {1000 * st.db_seconds / n:.2f} ms/item   DB CPU {1000 * st.db_cpu_seconds / n:.2f} ms/item"
        f"   claims {1000 * st.claim_seconds / n:.2f} ms/item ({st.claims} claims)"
    )
    batches = ROUND_TRIPS["batches"]
    each = ROUND_TRIPS["writer"] / batches
    print(f"  writes: {batches} batches of {n / batches:.1f} items, {each:.2f} round trips each")


if __name__ == "__main__":
    main()

"""Prints what reading a job's results back costs per item: the JSONL, CSV and Parquet exports
(``jobs.exports.files.write_export``, the API's writers) and OpenAI batch output (``vlbatch run-batch``'s file),
over a SQLite job of N finished items (tagging answers, one in ten failed), the best of a few rounds each, in
this process's CPU time (SQLite runs in it; a shared host's load does not count) and wall time.

Usage: python benchmarks/result_exports.py [--items N] [--rounds R]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from sqlalchemy import update

from jobs.exports.files import write_export
from jobs.request import JobRequest
from jobs.submit import insert
from vlbatch.db import job_store, outcomes
from vlbatch.db.models import Item, ItemStatus
from vlbatch.db.session import make_engine, make_sessionmaker, migrate
from vlbatch.settings import Settings
from worker import run_batch

TAGS = ["beach", "sunset", "people", "sea", "sky"]
MARKER = outcomes.Marker(model="bench", model_revision=None, pipeline_version="1", options_hash="h")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], prog="python benchmarks/result_exports.py")
    parser.add_argument("--items", type=int, default=20_000, help="items in the job (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per export, the best kept (default: %(default)s)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'bench.db'}"
        migrate(url)
        sessions = make_sessionmaker(make_engine(url))
        with sessions() as s:
            items = [job_store.NewItem(inputs={"images": [f"{i}.jpg"]}, ref=f"r{i}") for i in range(args.items)]
            settings = Settings(database_url=url, max_items_per_job=max(args.items, 1))
            request = JobRequest(pipeline="image_tagging", model="bench", options={}, items=items)
            job = insert(s, settings, request, admit=False)
            s.execute(update(Item).where(Item.job_id == job.id).values(status=ItemStatus.RUNNING))
            ids = [i.id for i in s.query(Item.id).where(Item.job_id == job.id).order_by(Item.id)]
            done = [
                outcomes.Outcome(i, job.id, None, None, 0, 0, "decode_error", "not an image")
                if k % 10 == 9
                else outcomes.Outcome(i, job.id, {"tags": TAGS, "caption": f"picture {k}"}, '{"tags": []}', 120, 14)
                for k, i in enumerate(ids)
            ]
            outcomes.record_outcomes(s, outcomes=done, markers={job.id: MARKER})
            s.commit()
            job_id = job.id
        runs = {
            "jsonl": lambda: write_export(sessions, job_id, Path(tmp) / "r.jsonl"),
            "csv": lambda: write_export(sessions, job_id, Path(tmp) / "r.csv"),
            "parquet": lambda: write_export(sessions, job_id, Path(tmp) / "r.parquet"),
            "batch output": lambda: run_batch._write(
                sessions, job_id, "/v1/chat/completions", "bench", Path(tmp) / "b"
            ),
        }
        for name, run in runs.items():
            times = [_timed(run) for _ in range(args.rounds)]
            cpu, wall = min(t[0] for t in times), min(t[1] for t in times)
            print(f"{name:13s} {args.items} items: CPU {cpu / args.items * 1e6:.1f} us/item, wall {wall:.3f} s")


def _timed(run: object) -> tuple[float, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    run()  # type: ignore[operator]
    return time.process_time() - cpu, time.perf_counter() - wall


if __name__ == "__main__":
    main()

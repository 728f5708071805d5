"""How close a dry run's engine time comes to the run: the tiny model (or ``--model``) on this machine's engine.

1. A dry run of folder A with no measured rate: the planner's estimate for ``--card`` (unknown without one).
2. The real run of folder A, in process (its engine samples go to the run's database every second).
3. A dry run of folder B (as many photos as A, another set): now from the rate step 2 measured.
4. The real run of folder B.

It prints each estimate against the engine time measured by the run (``EmbeddedRun.run_seconds``: from the
engine loaded to the last result written) and their ratio. Photos are the demo's (``cli/demo.py``); the run uses
the demo's CPU-friendly engine settings. Two engine loads: about two minutes for the tiny model on CPU.

Usage: python benchmarks/estimate_accuracy.py [--photos N] [--model DIR] [--card CARD] [--cards N]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from cli.demo import DEMO_MODEL_DIR, DEMO_OPTIONS, write_sample_photos
from jobs.estimate import Estimate
from vlbatch.settings import Settings
from worker.embedded import tag_directory
from worker.estimates import estimate_directory

CPU_ENGINE = {"dtype": "float32", "max_model_len": 2048, "kv_cache_memory_bytes": 256 << 20, "enforce_eager": True}


def _row(step: str, e: Estimate, measured: float) -> str:
    est = e.engine_seconds.value
    shown = f"{est:9.2f}" if est is not None else "  unknown"
    ratio = f"{est / measured:6.2f}" if est is not None and measured > 0 else "     -"
    return f"{step:<34} {shown} {measured:10.2f} {ratio}   {e.engine_seconds.assumption}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--photos", type=int, default=96)
    parser.add_argument("--model", type=Path, default=DEMO_MODEL_DIR)
    parser.add_argument("--card", default=None, help="Card the planner plans for (engine/device_specs.json).")
    parser.add_argument("--cards", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        folders = []
        for name in ("a", "b"):
            folder = work / name
            write_sample_photos(folder, count=args.photos, broken=0)
            folders.append(folder)
        settings = Settings(
            database_url=f"sqlite:///{work / 'runs.db'}",
            model_name=args.model.name,
            engine=CPU_ENGINE if args.model == DEMO_MODEL_DIR else {},
            engine_sample_interval_s=1.0,
        )
        opts = DEMO_OPTIONS.model_dump()
        rows = []
        for step, folder in (("A: planner (no rate yet)", folders[0]), ("B: measured rate of run A", folders[1])):
            e = estimate_directory(
                settings,
                directory=folder,
                model_dir=args.model,
                pipeline="image_tagging",
                options=opts,
                card=args.card,
                cards=args.cards,
            )
            run = tag_directory(
                settings, directory=folder, model_dir=args.model, opts=DEMO_OPTIONS, out=work / "out.jsonl"
            )
            rows.append(_row(step, e, run.run_seconds))
        print(f"{args.photos} photos per folder, model {args.model.name}, card {args.card or '-'}")
        print(f"{'estimate':<34} {'est. s':>9} {'measured s':>10} {'ratio':>6}   assumption")
        for row in rows:
            print(row)


if __name__ == "__main__":
    main()

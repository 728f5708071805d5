"""How close a dry run's engine time comes to the run: the bench's tiny model (or ``--model``) on this machine.

The engine is loaded once and warmed up on a few photos (untimed). Then:

1. a dry run of folder A with no measured rate: the planner's estimate for ``--card`` (unknown without one);
2. the run of folder A (the feeder samples its engine every second into the run's database);
3. a dry run of folder B (as many photos as A, another set): now from the rate step 2 measured;
4. the run of folder B.

It prints each estimate against the engine time the run took (from its first claim to its last result written)
and their ratio, with what the run generated: output tokens per item (against the max_tokens budget the planner
plans with), engine steps and the mean number of sequences per step. Photos and models are the bench's
(``benchmarks/harness/inputs.py``: generated 640x480 photos, the random-weight ``tiny`` or ``reference``
Qwen2-VL, or a model directory), at 64 visual tokens, with CPU-friendly engine settings. ``--max-tags`` and
``--caption`` change the answers' length (the CPU platform's host costs were fitted over two lengths).

Usage: python benchmarks/estimate_accuracy.py [--photos N] [--model tiny|reference|DIR] [--card CARD] [--cards N]
       [--max-tags N] [--caption]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from sqlalchemy import delete

from benchmarks.harness.inputs import write_model, write_photos
from engine.runtime.config import EngineConfig
from engine.runtime.runner import EngineRunner
from jobs.estimate import Estimate
from jobs.request import JobRequest
from jobs.submit import submit
from pipelines.image_tagging import TaggingOptions
from vlbatch.db import job_store
from vlbatch.db.models import EngineSample
from vlbatch.db.session import migrate
from vlbatch.settings import Settings
from worker.context import WorkerContext
from worker.embedded import JobRun, run_job
from worker.estimates import estimate_with_model
from worker.startup import build_context

CPU_ENGINE = {"dtype": "float32", "max_model_len": 2048, "kv_cache_memory_bytes": 256 << 20, "enforce_eager": True}


def _row(step: str, e: Estimate, measured: float, run: JobRun) -> str:
    est = e.engine_seconds.value
    shown = f"{est:9.2f}" if est is not None else "  unknown"
    ratio = f"{est / measured:6.2f}" if est is not None and measured > 0 else "     -"
    done, occ = max(run.stats.items_done, 1), run.occupancy
    tokens = f"{run.stats.output_tokens / done:7.1f}/{e.per_item[0].output_tokens if e.per_item else 0:<5}"
    batch = f"{occ.running_sum / occ.steps:5.1f}" if occ.steps else "    -"
    return (
        f"{step:<34} {shown} {measured:10.2f} {ratio} {tokens} {run.stats.items_done:6d} {occ.steps:6d} {batch}"
        f"   {e.engine_seconds.assumption}"
    )


def _submit(ctx: WorkerContext, settings: Settings, folder: Path, options: TaggingOptions) -> str:
    paths = [str(p) for p in sorted(folder.glob("*.jpg"))]
    request = JobRequest(
        pipeline="image_tagging",
        model=ctx.model_name,
        options=options.model_dump(),
        items=job_store.items_from_paths(paths, images_per_prompt=1),
    )
    with ctx.sessions() as s:  # as `vlbatch tag` makes it: fed from its chunk list, no broker
        return submit(s, settings, request, publish=False, admit=False).id


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--photos", type=int, default=96)
    parser.add_argument("--model", default="tiny", help="tiny, reference (generated) or a model directory.")
    parser.add_argument("--card", default=None, help="Card the planner plans for (engine/device_specs.json).")
    parser.add_argument("--cards", type=int, default=1)
    parser.add_argument("--max-tags", type=int, default=5, help="Tags asked per photo.")
    parser.add_argument("--caption", action="store_true", help="Also ask for a caption (longer answers).")
    args = parser.parse_args()
    options = TaggingOptions(max_tags=args.max_tags, caption=args.caption, max_visual_tokens=64)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model = write_model(args.model, work)
        folders = []
        for k, name in enumerate(("warm", "a", "b")):
            folder = work / name
            write_photos(folder, 8 if name == "warm" else args.photos, size=(640, 480), first=k * args.photos)
            folders.append(folder)
        settings = Settings(
            database_url=f"sqlite:///{work / 'runs.db'}",
            model_name=model.name,
            engine=CPU_ENGINE,
            engine_sample_interval_s=1.0,
            allowed_input_roots=[work],
        )
        migrate(settings.database.database_url)
        runner = EngineRunner(EngineConfig.model_validate({**CPU_ENGINE, "model": str(model)}))
        ctx = build_context(settings, runner, model_dir=model, model_name=model.name)
        rows = []
        try:
            # warm-up, untimed; it is sampled, but no rate is read yet
            run_job(ctx, _submit(ctx, settings, folders[0], options))
            with ctx.sessions() as s:
                s.execute(delete(EngineSample))  # step 1 estimates with no measured rate
                s.commit()
            for step, folder in (("A: planner (no rate yet)", folders[1]), ("B: measured rate of run A", folders[2])):
                with ctx.sessions() as s:
                    request = JobRequest(
                        pipeline="image_tagging",
                        model=ctx.model_name,
                        options=options.model_dump(),
                        items=job_store.items_from_paths(
                            [str(p) for p in sorted(folder.glob("*.jpg"))], images_per_prompt=1
                        ),
                    )
                    e = estimate_with_model(s, settings, request, model_dir=model, card=args.card, cards=args.cards)
                job_id = _submit(ctx, settings, folder, options)
                started = time.perf_counter()
                run = run_job(ctx, job_id)
                rows.append(_row(step, e, time.perf_counter() - started, run))
        finally:
            ctx.pool.shutdown()
            runner.close()
        print(
            f"{args.photos} photos per folder, model {args.model}, card {args.card or '-'}, max_tags {args.max_tags}"
            f"{', caption' if args.caption else ''}"
        )
        print(
            f"{'estimate':<34} {'est. s':>9} {'measured s':>10} {'ratio':>6} {'out tok/item/budget':>13}"
            f" {'items':>6} {'steps':>6} {'batch':>5}   assumption"
        )
        for row in rows:
            print(row)


if __name__ == "__main__":
    main()

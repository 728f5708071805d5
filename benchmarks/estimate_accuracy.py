"""How close a dry run's engine time comes to the run: the bench's tiny model (or ``--model``) on this machine.

The engine is loaded once and warmed up on a few photos (untimed). Then:

1. a dry run of folder A with no measured rate: the planner's estimate for ``--card`` (unknown without one);
2. the run of folder A (the feeder samples its engine every second into the run's database);
3. a dry run of folder B (as many photos as A, another set): now from the rate step 2 measured;
4. the run of folder B.

It prints each estimate against the engine time the run took (from its first claim to its last result written)
and their ratio. Photos and models are the bench's (``benchmarks/harness/inputs.py``: generated 640x480 photos,
the random-weight ``tiny`` or ``reference`` Qwen2-VL, or a model directory), at 64 visual tokens, with
CPU-friendly engine settings.

Usage: python benchmarks/estimate_accuracy.py [--photos N] [--model tiny|reference|DIR] [--card CARD] [--cards N]
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
from jobs.submit import JobRequest, submit
from pipelines.image_tagging import TaggingOptions
from vlbatch.db import job_store
from vlbatch.db.models import EngineSample
from vlbatch.db.session import migrate
from vlbatch.settings import Settings
from worker.context import WorkerContext
from worker.embedded import run_job
from worker.estimates import estimate_with_model
from worker.startup import build_context

OPTIONS = TaggingOptions(max_tags=5, max_visual_tokens=64)
CPU_ENGINE = {"dtype": "float32", "max_model_len": 2048, "kv_cache_memory_bytes": 256 << 20, "enforce_eager": True}


def _row(step: str, e: Estimate, measured: float) -> str:
    est = e.engine_seconds.value
    shown = f"{est:9.2f}" if est is not None else "  unknown"
    ratio = f"{est / measured:6.2f}" if est is not None and measured > 0 else "     -"
    return f"{step:<34} {shown} {measured:10.2f} {ratio}   {e.engine_seconds.assumption}"


def _submit(ctx: WorkerContext, settings: Settings, folder: Path) -> str:
    paths = [str(p) for p in sorted(folder.glob("*.jpg"))]
    request = JobRequest(
        pipeline="image_tagging",
        model=ctx.model_name,
        options=OPTIONS.model_dump(),
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
    args = parser.parse_args()
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
        migrate(settings.database_url)
        runner = EngineRunner(EngineConfig.model_validate({**CPU_ENGINE, "model": str(model)}))
        ctx = build_context(settings, runner, model_dir=model, model_name=model.name)
        rows = []
        try:
            run_job(ctx, _submit(ctx, settings, folders[0]))  # warm-up, untimed; it is sampled, but no rate is read yet
            with ctx.sessions() as s:
                s.execute(delete(EngineSample))  # step 1 estimates with no measured rate
                s.commit()
            for step, folder in (("A: planner (no rate yet)", folders[1]), ("B: measured rate of run A", folders[2])):
                with ctx.sessions() as s:
                    request = JobRequest(
                        pipeline="image_tagging",
                        model=ctx.model_name,
                        options=OPTIONS.model_dump(),
                        items=job_store.items_from_paths(
                            [str(p) for p in sorted(folder.glob("*.jpg"))], images_per_prompt=1
                        ),
                    )
                    e = estimate_with_model(s, settings, request, model_dir=model, card=args.card, cards=args.cards)
                job_id = _submit(ctx, settings, folder)
                started = time.perf_counter()
                run_job(ctx, job_id)
                rows.append(_row(step, e, time.perf_counter() - started))
        finally:
            ctx.pool.shutdown()
            runner.close()
        print(f"{args.photos} photos per folder, model {args.model}, card {args.card or '-'}")
        print(f"{'estimate':<34} {'est. s':>9} {'measured s':>10} {'ratio':>6}   assumption")
        for row in rows:
            print(row)


if __name__ == "__main__":
    main()

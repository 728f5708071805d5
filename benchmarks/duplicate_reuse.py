"""Duplicates run once: a tagging job over an album where a share of the photos are byte copies, with reuse on
(the default) and with ``"reuse": false``, on one engine in one run.

The album is the harness's realistic JPEGs (``benchmarks/harness/inputs.py``) plus byte copies of randomly chosen
ones, all under shuffled names so a copy is as likely to come before its original as after it. Each round runs
both jobs through the embedded path (SQLite, the feeder, the engine loaded once; a warm-up job first), in
alternating order; each job is its own tenant's, so neither finds the other's answers and reuse happens only
inside a job; the engine's prefix cache is off, so no job finds another's prompts there. Timed: submitting the
job until its last result is written. Prints seconds, items/s, engine
requests and reused items per job, and the speed-up of reuse per round and over the median.

    python benchmarks/duplicate_reuse.py --photos 300 --copies 0.3 --size 640x480 --max-visual-tokens 64 --rounds 4
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from benchmarks.harness.inputs import prepare_inputs
from benchmarks.harness.spec import DEFAULT_ENGINE, BenchSpec
from engine.runtime.runner import EngineRunner
from jobs.request import JobRequest
from jobs.submit import submit
from pipelines import image_tagging
from vlbatch.db import job_store
from vlbatch.db.models import Result
from vlbatch.settings import Settings
from worker.context import WorkerContext
from worker.embedded import run_job
from worker.startup import build_context


def duplicate_album(originals: list[Path], folder: Path, *, total: int, seed: int) -> int:
    """``total`` photos in ``folder``: every one of ``originals`` and copies of random ones to make up the
    number, under shuffled names. Returns how many are copies."""
    rng = random.Random(seed)
    sources = list(originals) + [rng.choice(originals) for _ in range(total - len(originals))]
    rng.shuffle(sources)
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    for k, src in enumerate(sources):
        shutil.copyfile(src, folder / f"IMG_{k:05d}.jpg")
    return total - len(originals)


def _timed_job(
    ctx: WorkerContext, settings: Settings, spec: BenchSpec, album: Path, *, reuse: bool, tenant: str
) -> dict[str, Any]:
    opts = spec.tagging_options().model_dump()
    opts["reuse"] = reuse
    paths = sorted(str(p) for p in album.glob("*.jpg"))
    started = time.perf_counter()
    request = JobRequest(
        pipeline=image_tagging.NAME,
        model=spec.model_name,
        options=opts,
        tenant=tenant,
        items=job_store.items_from_paths(paths, images_per_prompt=1),
    )
    with ctx.sessions() as s:
        job_id = submit(s, settings, request, publish=False, admit=False).id
    run = run_job(ctx, job_id)
    seconds = time.perf_counter() - started
    with ctx.sessions() as s:
        counts = job_store.item_counts(s, job_id=job_id)
        reused = s.scalar(select(func.count()).where(Result.job_id == job_id, Result.reused_from.is_not(None))) or 0
    return {
        "reuse": reuse,
        "seconds": seconds,
        "items": counts["succeeded"] + counts["failed"],
        "failed": counts["failed"],
        "reused": reused,
        "engine_items": counts["succeeded"] + counts["failed"] - reused,
        "output_tokens": run.stats.output_tokens,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--photos", type=int, default=300, help="Photos in the album, copies included.")
    parser.add_argument("--copies", type=float, default=0.3, help="Share of the photos that are byte copies.")
    parser.add_argument("--size", default="640x480", help="Photo size, WxH.")
    parser.add_argument("--max-visual-tokens", type=int, default=64)
    parser.add_argument("--model", default="tiny", help="tiny, reference or a model directory.")
    parser.add_argument("--rounds", type=int, default=4, help="Rounds of both jobs, in alternating order.")
    parser.add_argument("--workdir", type=Path, default=Path("vlbatch-bench"), help="Model and photos (reused).")
    args = parser.parse_args()
    w, h = (int(v) for v in args.size.lower().split("x"))
    n_copies = round(args.photos * args.copies)
    spec = BenchSpec(
        model=args.model,
        n_photos=args.photos - n_copies,
        photo_size=(w, h),
        max_visual_tokens=args.max_visual_tokens,
        work_dir=args.workdir,
        # Each job over the same photos would find the one before in the engine's prefix cache; a real album's
        # job finds nothing there, so neither may here.
        engine={**DEFAULT_ENGINE, "enable_prefix_caching": False},
    )
    inputs = prepare_inputs(spec)
    album = args.workdir.resolve() / f"duplicates-{args.photos}-{n_copies}"
    duplicate_album(inputs.photos, album, total=args.photos, seed=spec.seed)
    with tempfile.TemporaryDirectory(prefix="vlbatch-bench-reuse-") as tmp:
        settings = Settings(
            database_url=f"sqlite:///{Path(tmp) / 'bench.db'}",
            allowed_input_roots=[album, *({p.parent for p in inputs.warmup})],
            chunk_size=spec.chunk_size,
            preprocess_threads=spec.preprocess_threads,
            engine=spec.engine_args(),
        )
        runner = EngineRunner(spec.engine_config(inputs.model_dir))
        ctx = build_context(settings, runner, model_dir=inputs.model_dir, model_name=spec.model_name)
        rows = []
        try:
            if inputs.warmup:
                request = JobRequest(
                    pipeline=image_tagging.NAME,
                    model=spec.model_name,
                    options=spec.tagging_options().model_dump(),
                    tenant="warm-up",
                    items=job_store.items_from_paths([str(p) for p in inputs.warmup], images_per_prompt=1),
                )
                with ctx.sessions() as s:
                    run_job(ctx, submit(s, settings, request, publish=False, admit=False).id)
            for r in range(args.rounds):
                order = (True, False) if r % 2 else (False, True)
                for reuse in order:
                    row = _timed_job(ctx, settings, spec, album, reuse=reuse, tenant=f"round{r}-reuse-{reuse}")
                    rows.append({"round": r, **row})
        finally:
            ctx.pool.shutdown()
            runner.close()
    print(
        f"album: {args.photos} photos {w}x{h}, {n_copies} byte copies ({n_copies / args.photos:.0%}); "
        f"model {args.model}, {args.max_visual_tokens} visual tokens, max_num_seqs {spec.max_num_seqs}"
    )
    print(f"{'round':>5} {'reuse':>6} {'seconds':>8} {'items/s':>8} {'engine items':>13} {'reused':>7} {'failed':>7}")
    for row in rows:
        print(
            f"{row['round']:>5} {str(row['reuse']).lower():>6} {row['seconds']:>8.2f} "
            f"{row['items'] / row['seconds']:>8.1f} {row['engine_items']:>13} {row['reused']:>7} {row['failed']:>7}"
        )
    speedups = []
    for r in range(args.rounds):
        on, off = (next(x for x in rows if x["round"] == r and x["reuse"] is v) for v in (True, False))
        speedups.append(off["seconds"] / on["seconds"])
        print(f"round {r}: reuse is {speedups[-1]:.2f}x faster than reuse false")
    median_on = statistics.median(x["seconds"] for x in rows if x["reuse"])
    median_off = statistics.median(x["seconds"] for x in rows if not x["reuse"])
    print(f"median: {median_off:.2f} s without reuse, {median_on:.2f} s with reuse: {median_off / median_on:.2f}x")


if __name__ == "__main__":
    main()

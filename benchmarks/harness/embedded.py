"""Arm (b): the embedded path of ``vlbatch tag``: a job in SQLite, the feeder and the engine in this process.

The engine is loaded once; a warm-up job over the warm-up photos runs first, untimed. Timed: creating
the timed job in SQL, feeding every chunk through the feeder until the last result is written, and
exporting the results file, as ``vlbatch tag`` does (the engine load is not).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from benchmarks.harness.inputs import split_warmup
from benchmarks.harness.result import ArmResult, Sample, db_figures
from benchmarks.harness.spec import BenchSpec
from engine.runtime.runner import EngineRunner
from jobs.exports.files import write_export
from jobs.request import JobRequest
from jobs.submit import submit
from pipelines import image_tagging
from vlbatch.db import job_store
from vlbatch.settings import Settings
from worker.embedded import run_job
from worker.startup import build_context


def _create(sessions: sessionmaker[Session], settings: Settings, spec: BenchSpec, photos: list[Path]) -> str:
    opts = spec.tagging_options()
    request = JobRequest(
        pipeline=image_tagging.NAME,
        model=spec.model_name,
        options=opts.model_dump(),
        items=job_store.items_from_paths([str(p) for p in photos], images_per_prompt=opts.images_per_prompt),
    )
    with sessions() as s:  # as `vlbatch tag` makes it: fed from its chunk list, no broker, no quotas
        return submit(s, settings, request, publish=False, admit=False).id


def run_embedded_arm(spec: BenchSpec, model_dir: Path, photos: list[Path]) -> ArmResult:
    warm, timed = split_warmup(spec, photos)
    with tempfile.TemporaryDirectory(prefix="vlbatch-bench-embedded-") as tmp:
        roots = sorted({p.parent for p in photos})
        settings = Settings(
            database_url=f"sqlite:///{Path(tmp) / 'bench.db'}",
            allowed_input_roots=roots,
            chunk_size=spec.chunk_size,
            preprocess_threads=spec.preprocess_threads,
            engine=spec.engine_args(),
        )
        runner = EngineRunner(spec.engine_config(model_dir))
        ctx = build_context(settings, runner, model_dir=model_dir, model_name=spec.model_name)
        try:
            if warm:
                run_job(ctx, _create(ctx.sessions, settings, spec, warm))
            t0 = time.perf_counter()
            job_id = _create(ctx.sessions, settings, spec, timed)
            fed_from = time.perf_counter() - t0
            run = run_job(ctx, job_id, sample_every_s=0.5)
            write_export(ctx.sessions, job_id, Path(tmp) / "results.jsonl")
            seconds = time.perf_counter() - t0
        finally:
            ctx.pool.shutdown()
            runner.close()
        with ctx.sessions() as s:
            counts = job_store.item_counts(s, job_id=job_id)
    st = run.stats
    timeline: list[Sample] = [(0.0, 0, None), *((t + fed_from, n, r) for t, n, r in run.timeline)]
    return ArmResult(
        name="embedded",
        items=counts["succeeded"] + counts["failed"],
        failed=counts["failed"],
        seconds=seconds,
        output_tokens=st.output_tokens,
        prompt_tokens=st.prompt_tokens,
        mean_occupancy=run.occupancy.mean_running_since(),
        max_num_seqs=spec.max_num_seqs,
        prep_ms_per_image=1000 * st.prep_seconds / st.prep_images if st.prep_images else None,
        **db_figures(
            st.db_items,
            db_s=st.db_seconds,
            db_cpu_s=st.db_cpu_seconds,
            claim_s=st.claim_seconds,
            claim_cpu_s=st.claim_cpu_seconds,
        ),
        timeline=timeline,
        images=len(timed),
        notes=f"occupancy from the {run.occupancy.source}",
    )

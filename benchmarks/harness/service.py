"""Arm (c): the service path. The REST API (uvicorn on loopback, in this process) takes the job over the
photo folder, Redis carries the chunk ids, a real ``vlbatch worker`` process runs the feeder and the
engine and writes PostgreSQL (a database made for the run and dropped after).

Timed: from just before the job's POST to the job's ``finished_at`` (written by the worker when its last
result lands); the engine load and a warm-up job are not. Occupancy, preprocessing and DB time come
from the worker's own ``engine_samples`` (every second here), between the samples around the timed job.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.harness.children import child_env, free_port
from benchmarks.harness.inputs import split_warmup
from benchmarks.harness.result import ArmResult, Sample, db_figures
from benchmarks.harness.spec import BenchSpec

SAMPLE_S = 1.0


def _wait_finished(client: Any, job_id: str, *, timeout_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        state: dict[str, Any] = client.get(f"/v1/jobs/{job_id}").json()
        if state["status"] == "finished":
            return state
        if time.monotonic() > deadline:
            raise TimeoutError(f"job {job_id} not finished after {timeout_s:.0f} s: {state['counts']}")
        time.sleep(0.5)  # the time comes from the job's finished_at: polling only needs to notice it


def _aware(at: datetime) -> datetime:
    return at if at.tzinfo else at.replace(tzinfo=UTC)


def run_service(spec: BenchSpec, model_dir: Path, photos: list[Path]) -> ArmResult:
    import httpx
    import psycopg
    import redis
    import uvicorn
    from sqlalchemy import create_engine, select
    from sqlalchemy.orm import Session

    from api.main import create_app
    from vlbatch.db.keys import issue_key
    from vlbatch.db.models import EngineSample, Job
    from vlbatch.settings import Settings

    warm, timed = split_warmup(spec, photos)
    album = timed[0].parent
    roots = sorted({p.parent for p in photos})
    redis.Redis.from_url(spec.redis_url).flushdb()
    name = f"vlbatch_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(spec.pg_admin_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    db = spec.pg_admin_url.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://") + "/" + name
    common = {
        "database_url": db,
        "broker_url": spec.redis_url,
        "model_name": spec.model_name,
        "allowed_input_roots": roots,
        "chunk_size": spec.chunk_size,
    }
    headers = {"Authorization": f"Bearer {issue_key(db, tenant='bench', name='vlbatch bench')}"}
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(Settings(**common)), host="127.0.0.1", port=port, log_level="warning")
    )
    threading.Thread(target=server.run, daemon=True).start()
    env = child_env(
        {
            "VLBATCH_DATABASE_URL": db,
            "VLBATCH_BROKER_URL": spec.redis_url,
            "VLBATCH_MODEL_PATH": str(model_dir),
            "VLBATCH_MODEL_NAME": spec.model_name,
            "VLBATCH_ALLOWED_INPUT_ROOTS": ",".join(str(r) for r in roots),
            "VLBATCH_ENGINE": json.dumps(spec.engine_args()),
            "VLBATCH_CHUNK_SIZE": str(spec.chunk_size),
            "VLBATCH_PREPROCESS_THREADS": str(spec.preprocess_threads),
            "VLBATCH_ENGINE_SAMPLE_INTERVAL_S": str(SAMPLE_S),
        }
    )
    options = spec.tagging_options().model_dump()
    engine = create_engine(db)
    with tempfile.TemporaryDirectory(prefix="vlbatch-bench-service-") as tmp:
        log_path = Path(tmp) / "worker.log"
        with log_path.open("wb") as log:
            worker = subprocess.Popen(
                [sys.executable, "-c", "from cli.main import main; main()", "worker"],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            while b"ready." not in log_path.read_bytes():  # engine loaded, consuming
                if worker.poll() is not None:
                    raise RuntimeError("worker exited:\n" + log_path.read_text()[-3000:])
                time.sleep(0.5)
            while not server.started:
                time.sleep(0.1)
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120, headers=headers) as client:
                if warm:
                    body = {"directory": str(warm[0].parent), "options": options}
                    _wait_finished(client, client.post("/v1/jobs/tagging", json=body).json()["id"], timeout_s=3600)
                time.sleep(1.5 * SAMPLE_S)  # a sample between the warm-up and the timed job
                posted = datetime.now(UTC)
                job = client.post("/v1/jobs/tagging", json={"directory": str(album), "options": options}).json()
                state = _wait_finished(client, job["id"], timeout_s=24 * 3600)
            time.sleep(1.5 * SAMPLE_S)  # the sample that closes the timed job
            with Session(engine) as s:
                row = s.get(Job, job["id"])
                assert row is not None and row.finished_at is not None
                finished = _aware(row.finished_at)
                samples = list(s.scalars(select(EngineSample).order_by(EngineSample.id)))
        finally:
            worker.terminate()
            try:
                worker.wait(120)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait(30)
            server.should_exit = True
            engine.dispose()
            with psycopg.connect(spec.pg_admin_url, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    seconds = (finished - posted).total_seconds()
    before = [x for x in samples if _aware(x.sampled_at) <= posted]
    after = [x for x in samples if _aware(x.sampled_at) >= finished]
    first = before[-1] if before else None
    last = after[0] if after else (samples[-1] if samples else None)
    timeline: list[Sample] = [(0.0, 0, None)]
    occupancy = prep_ms = None
    db_ms = db_figures(0, db_s=0, db_cpu_s=0, claim_s=0, claim_cpu_s=0)
    if first is not None and last is not None and last.steps > first.steps:
        occupancy = (last.running_sum - first.running_sum) / (last.steps - first.steps)
        images = last.prep_images - first.prep_images
        prep_ms = 1000 * (last.prep_seconds - first.prep_seconds) / images if images else None
        db_ms = db_figures(
            last.db_items - first.db_items,
            db_s=last.db_seconds - first.db_seconds,
            db_cpu_s=last.db_cpu_seconds - first.db_cpu_seconds,
            claim_s=last.claim_seconds - first.claim_seconds,
            claim_cpu_s=last.claim_cpu_seconds - first.claim_cpu_seconds,
        )
        for x in samples:
            at = _aware(x.sampled_at)
            if first.id < x.id <= last.id:
                t = min((at - posted).total_seconds(), seconds)
                timeline.append((t, x.items_done - first.items_done, x.mean_running))
    counts = state["counts"]
    out_tokens = (last.output_tokens - first.output_tokens) if first is not None and last is not None else 0
    return ArmResult(
        name="service",
        items=counts["succeeded"] + counts["failed"],
        failed=counts["failed"],
        seconds=seconds,
        output_tokens=out_tokens,
        prompt_tokens=0,
        mean_occupancy=occupancy,
        max_num_seqs=spec.max_num_seqs,
        prep_ms_per_image=prep_ms,
        **db_ms,
        timeline=timeline,
        images=len(timed),
        notes="HTTP -> Redis -> Celery worker -> engine -> PostgreSQL; POST to finished_at",
    )

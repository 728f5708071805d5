"""Items/s of the whole service path against raw ``LLM.generate`` on the same inputs, in one run.

1. raw: this process preprocesses every photo exactly as the worker does, builds the same prompts and
   sampling parameters, and times one ``LLM.generate`` call over all of them (engine load excluded);
2. service: the REST API (uvicorn on loopback) takes a job over the same folder, Redis carries the
   chunk ids, a real ``vlbatch worker`` process runs the engine and writes PostgreSQL; timed from
   the first claim to the last result (the job's own started_at/finished_at; engine load excluded).

Usage: python benchmarks/e2e_throughput.py [N_PHOTOS] [PG_ADMIN_URL] [REDIS_URL]
Defaults: 400, postgresql://127.0.0.1:5432/test, redis://127.0.0.1:6379/14. Needs the cpu extra.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vlbatch.settings import Settings

ENGINE = {
    "dtype": "float32",
    "max_model_len": 2048,
    "kv_cache_memory_bytes": 512 << 20,
    "enforce_eager": True,
    "max_num_seqs": 64,
}
OPTIONS = {"max_tags": 5, "max_visual_tokens": 64}


def raw_generate(model: Path, photos: list[Path], settings: Settings) -> float:
    """Seconds for one LLM.generate over every photo, prepared the worker's way."""
    from vllm import LLM, SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    from engine.config import EngineConfig
    from engine.runner import EngineRunner
    from engine.structured import for_vllm
    from engine.vision import VisionGeometry
    from pipelines import image_tagging
    from vlbatch.db.models import Item
    from worker.processor import ProcessorContext, prepare_item

    cfg = EngineConfig.model_validate({**ENGINE, "model": str(model)})
    llm = LLM(**cfg.llm_kwargs())
    opts = image_tagging.TaggingOptions(**OPTIONS)

    # prepare_item reads only the settings, the geometry and the engine's image limit: no DB, no runner loop.
    ctx = ProcessorContext(
        settings=settings,
        sessions=None,  # type: ignore[arg-type]
        runner=EngineRunner(cfg, engine_factory=lambda: None),
        model_name="tiny",
        owner="bench",
        pool=ThreadPoolExecutor(4),
        geometry=VisionGeometry.from_model_dir(model),
    )
    items = [
        Item(id=i, job_id="b", chunk_id=0, seq=i, inputs={"images": [str(p)]}, attempts=0) for i, p in enumerate(photos)
    ]
    t0 = time.perf_counter()
    reqs = list(ctx.pool.map(lambda it: prepare_item(ctx, it, opts), items))
    prompts: list[Any] = [{"prompt": r.prompt, "multi_modal_data": {"image": r.images}} for r in reqs]
    sp = SamplingParams(
        max_tokens=reqs[0].max_tokens,
        temperature=0.0,
        structured_outputs=StructuredOutputsParams(json=for_vllm(reqs[0].json_schema)),
    )
    outs = llm.generate(prompts, sp, use_tqdm=False)
    dt = time.perf_counter() - t0
    assert len(outs) == len(photos)
    tokens = sum(len(o.outputs[0].token_ids) for o in outs)
    print(
        f"raw LLM.generate: {len(photos)} items in {dt:.2f} s = {len(photos) / dt:.1f} items/s "
        f"(preprocessing included, {tokens} output tokens)",
        flush=True,
    )
    llm.llm_engine.engine_core.shutdown()
    return dt


def service_path(model: Path, album: Path, pg_admin: str, redis_url: str, work: Path) -> None:
    import httpx
    import psycopg
    import redis
    import uvicorn

    from api.main import create_app
    from vlbatch.settings import Settings

    redis.Redis.from_url(redis_url).flushdb()
    name = f"vlbatch_bench_{uuid.uuid4().hex[:6]}"
    with psycopg.connect(pg_admin, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    db = pg_admin.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://") + "/" + name
    settings = Settings(database_url=db, broker_url=redis_url, model_name="tiny", allowed_input_roots=[album])
    server = uvicorn.Server(uvicorn.Config(create_app(settings), host="127.0.0.1", port=8765, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLBATCH_")}
    env.update(
        {
            "VLBATCH_DATABASE_URL": db,
            "VLBATCH_BROKER_URL": redis_url,
            "VLBATCH_MODEL_PATH": str(model),
            "VLBATCH_MODEL_NAME": "tiny",
            "VLBATCH_ALLOWED_INPUT_ROOTS": str(album),
            "VLBATCH_ENGINE": json.dumps(ENGINE),
        }
    )
    log = (work / "worker.log").open("wb")
    worker = subprocess.Popen(
        [sys.executable, "-c", "from vlbatch.cli import main; main()", "worker"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        while b"ready." not in (work / "worker.log").read_bytes():  # engine loaded, consuming
            assert worker.poll() is None, (work / "worker.log").read_text()[-3000:]
            time.sleep(0.5)
        while not server.started:
            time.sleep(0.1)
        with httpx.Client(base_url="http://127.0.0.1:8765", timeout=60) as client:
            t0 = time.perf_counter()
            job = client.post("/v1/jobs/tagging", json={"directory": str(album), "options": OPTIONS}).json()
            while (state := client.get(f"/v1/jobs/{job['id']}").json())["status"] != "finished":
                time.sleep(0.2)
            wall = time.perf_counter() - t0
        c = state["counts"]
        print(
            f"service path (HTTP -> Redis -> Celery worker -> engine -> PostgreSQL): {c['succeeded']} succeeded, "
            f"{c['failed']} failed; {state['items_per_second']:.1f} items/s from first claim to last result, "
            f"{state['total'] / wall:.1f} items/s from POST to finished ({wall:.2f} s)",
            flush=True,
        )
    finally:
        worker.terminate()
        worker.wait(60)
        server.should_exit = True
        with psycopg.connect(pg_admin, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 400
    pg_admin = sys.argv[2] if len(sys.argv) > 2 else "postgresql://127.0.0.1:5432/test"
    redis_url = sys.argv[3] if len(sys.argv) > 3 else "redis://127.0.0.1:6379/14"
    from engine.tiny_model import write_tiny_qwen2_vl
    from vlbatch.demo import write_sample_photos
    from vlbatch.settings import Settings

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model = write_tiny_qwen2_vl(work / "model")
        album = work / "album"
        photos = [p for p in write_sample_photos(album, count=n, broken=0)]
        raw_generate(model, photos, Settings(allowed_input_roots=[album]))
        service_path(model, album, pg_admin, redis_url, work)


if __name__ == "__main__":
    main()

"""Engine samples bracket a run: one when the feeder starts and one when it closes, so a run shorter than the
sample interval still leaves its measured rate for a later dry run (vlbatch/db/rates.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image
from sqlalchemy import select

from engine.runtime.config import EngineConfig
from pipelines import image_tagging
from tests.support.scripted import ScriptedEngine, scripted_context, scripted_runner
from vlbatch.db import job_store, rates
from vlbatch.db.models import EngineSample, utcnow
from vlbatch.db.session import make_engine, make_sessionmaker, migrate
from worker.feeder import Feeder

pytestmark = pytest.mark.timeout(120)


def test_a_run_shorter_than_the_interval_is_sampled_at_its_start_and_end(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'samples.db'}"
    migrate(url)
    sessions = make_sessionmaker(make_engine(url))
    album = tmp_path / "album"
    album.mkdir()
    paths = []
    for i in range(8):
        Image.new("RGB", (56, 56), (i, 100, 150)).save(album / f"{i}.png")
        paths.append(str(album / f"{i}.png"))
    with sessions() as s:
        job = job_store.create_job(
            s,
            pipeline=image_tagging.NAME,
            model="m",
            options=image_tagging.TaggingOptions().model_dump(),
            items=job_store.items_from_paths(paths, images_per_prompt=1),
            chunk_size=4,
        )
        s.commit()
        chunks = job_store.chunks_of(s, job_id=job.id)
    engines: list[ScriptedEngine] = []
    runner = scripted_runner([], engines, EngineConfig(model="scripted", max_num_seqs=4))
    runner.load()
    ctx = scripted_context(sessions, runner, album)
    feeder = Feeder(ctx, sample_interval_s=3600)  # no interval ends during the run
    for cid in chunks:
        feeder.add_chunk(cid)
    assert feeder.wait_idle(60)
    feeder.close()
    runner.close()
    with sessions() as s:
        done = list(s.scalars(select(EngineSample.items_done).order_by(EngineSample.id)))
        rate = rates.measured_rate(s, model="m", now=utcnow())
    assert done == [0, 8]
    assert rate is not None and rate.items == 8 and rate.workers == 1

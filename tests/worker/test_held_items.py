"""What a claimed item may read (``worker.held_items``): its tenant's roots, not every global one; a file whose name is
not UTF-8 fails alone; a document's output folder outside its tenant's output roots is never written. Through the
real feeder, a scripted engine and a real database (SQLite and PostgreSQL)."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from PIL import Image
from sqlalchemy import select

from engine.runtime.config import EngineConfig
from pipelines import image_tagging
from tests.support.scripted import CHAT, scripted_runner
from vlbatch.db import job_store, tenants
from vlbatch.db.models import Item
from vlbatch.db.session import make_engine, make_sessionmaker, migrate
from vlbatch.inputs import iter_images
from vlbatch.settings import Settings
from worker.context import WorkerContext
from worker.feeder import Feeder

pytestmark = pytest.mark.timeout(120)


def _png(path: Path) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (56, 56), (10, 100, 150)).save(path)
    return str(path)


def test_items_read_only_under_their_tenants_roots_and_bad_names_fail_alone(db_url: str, tmp_path: Path) -> None:
    root = tmp_path / "shared"
    mine, theirs = _png(root / "a" / "mine.png"), _png(root / "b" / "theirs.png")
    with open(os.fsencode(root / "a") + b"/caf\xe9.png", "wb") as fh:  # a name an old camera wrote
        fh.write((root / "a" / "mine.png").read_bytes())
    settings = Settings(allowed_input_roots=[root])
    migrate(db_url)
    sessions = make_sessionmaker(make_engine(db_url))
    listed = [str(p) for p in iter_images(root / "a", recursive=False, roots=[root / "a"])]
    with sessions() as s:
        tenants.set_roots(s, settings, tenant="a", inputs=[str(root / "a")])
        items = [*job_store.items_from_paths(listed, images_per_prompt=1), job_store.NewItem({"images": [theirs]})]
        job = job_store.create_job(
            s,
            pipeline=image_tagging.NAME,
            model="m",
            options=image_tagging.TaggingOptions(max_tags=3).model_dump(),
            items=items,
            chunk_size=10,
            tenant="a",
        )
        s.commit()
        chunk_ids = job_store.chunks_of(s, job_id=job.id)
    steps: list[list[str]] = []
    runner = scripted_runner(steps, [], EngineConfig(model="scripted", max_num_seqs=4))
    runner.load()
    ctx = WorkerContext(settings, sessions, runner, "m", CHAT, pool=ThreadPoolExecutor(2))
    feeder = Feeder(ctx)
    try:
        for cid in chunk_ids:
            feeder.add_chunk(cid)
        assert feeder.wait_idle(60)
    finally:
        feeder.close()
        runner.close()
    with sessions() as s:
        rows = {(it.inputs["images"][0], it.status, it.error_code) for it in s.scalars(select(Item))}
    assert (mine, "succeeded", None) in rows
    assert (theirs, "failed", "outside_roots") in rows  # inside the global root, outside tenant a's
    assert (str(root / "a" / "caf\\xe9.png"), "failed", "file_name_not_utf8") in rows
    assert len(rows) == 3

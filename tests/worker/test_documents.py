"""Document items through the feeder with a scripted engine: the same rounds, crash policy and writer as
every item. A scanned page that crashes the engine (all black, as ``tests/worker/scripted.py`` poisons) is
blamed on its document alone, which fails at ``MAX_CRASHES_PER_ITEM``; a text document beside it finishes
with its stored parts and its JSON file."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from PIL import Image
from sqlalchemy import select

from engine.runtime.config import EngineConfig
from pipelines import extract
from tests.worker.scripted import CHAT, POISON, ScriptedEngine, scripted_runner
from vlbatch.db import crud
from vlbatch.db.models import DocumentPart, Item, Result
from vlbatch.db.session import make_engine, make_sessionmaker, migrate
from vlbatch.settings import Settings
from worker.context import WorkerContext
from worker.feeder import MAX_CRASHES_PER_ITEM, Feeder

pytestmark = pytest.mark.timeout(300)

SCHEMA = {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}}}}


def _scanned_black(path: Path) -> None:
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.utils import ImageReader
    from reportlab.pdfgen import canvas

    c = canvas.Canvas(str(path), pagesize=A4)
    c.drawImage(ImageReader(Image.new("RGB", (300, 400), POISON)), 0, 0, width=A4[0], height=A4[1])
    c.showPage()
    c.save()


def test_a_document_that_crashes_the_engine_fails_alone_and_the_other_is_written(
    tmp_path: Path, tiny_model: Path
) -> None:
    inputs, out = tmp_path / "inputs", tmp_path / "out"
    inputs.mkdir()
    _scanned_black(inputs / "scan.pdf")
    (inputs / "notes.txt").write_text("\n\n".join(f"Paragraph {i}: the buyer pays invoice {i}." for i in range(60)))
    db_url = f"sqlite:///{tmp_path / 'docs.db'}"
    migrate(db_url)
    sessions = make_sessionmaker(make_engine(db_url))
    with sessions() as s:
        job = crud.create_job(
            s,
            pipeline=extract.NAME,
            model="m",
            options={"json_schema": SCHEMA, "max_array_items": 3, "max_string_chars": 10},
            items=[crud.NewItem(inputs={"path": str(inputs / n)}, ref=n) for n in ("scan.pdf", "notes.txt")],
            chunk_size=10,
            output_dir=str(out),
        )
        job_id, chunk_ids = job.id, crud.chunks_of(s, job_id=job.id)
        s.commit()
    engines: list[ScriptedEngine] = []
    runner = scripted_runner([], engines, EngineConfig(model=str(tiny_model), max_model_len=1024))
    runner.load()
    ctx = WorkerContext(
        settings=Settings(allowed_input_roots=[inputs, out]),
        sessions=sessions,
        runner=runner,
        model_name="m",
        chat=CHAT,
        owner="w1",
        pool=ThreadPoolExecutor(2),
    )
    feeder = Feeder(ctx)
    for cid in chunk_ids:
        assert feeder.add_chunk(cid) is not None
    assert feeder.wait_idle(120)
    feeder.close()
    runner.close()
    with sessions() as s:
        items = {i.ref: i for i in s.scalars(select(Item).where(Item.job_id == job_id))}
        parts = {(p.item_id, p.stage) for p in s.scalars(select(DocumentPart))}
        result = s.scalars(select(Result).where(Result.item_id == items["notes.txt"].id)).one()
    scan, notes = items["scan.pdf"], items["notes.txt"]
    assert (scan.status, scan.error_code, scan.crash_count) == ("failed", "engine_crash", MAX_CRASHES_PER_ITEM)
    assert notes.status == "succeeded" and notes.crash_count == 0
    assert (notes.id, "map") in parts and not any(item == scan.id for item, _ in parts)
    assert result.output is not None and result.output["document"]["chunks"] >= 2
    assert json.loads((out / "notes.txt.json").read_text())["source"] == str(inputs / "notes.txt")
    crashes = sum(1 for e in engines if e.dead)
    assert MAX_CRASHES_PER_ITEM <= crashes <= 1 + MAX_CRASHES_PER_ITEM and len(engines) == crashes + 1

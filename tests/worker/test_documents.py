"""Document items through the feeder with a scripted engine: the same rounds, crash policy and writer as
every item. A scanned page that crashes the engine (all black, as ``tests/support/scripted.py`` poisons) is
blamed on its document alone, which fails at ``MAX_CRASHES_PER_ITEM``; a text document beside it finishes
with its stored parts and its JSON file."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from sqlalchemy import select

from engine.runtime.config import EngineConfig
from pipelines import extract
from tests.support.scripted import POISON, ScriptedEngine, scripted_context, scripted_runner
from vlbatch.db import job_store
from vlbatch.db.models import DocumentPart, Item, Result
from vlbatch.db.session import make_engine, make_sessionmaker, migrate
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


def _notes(path: Path) -> None:
    path.write_text("\n\n".join(f"Paragraph {i}: the buyer pays invoice {i}." for i in range(60)))


def _document_job(tmp_path: Path, inputs: Path, names: list[str], out: Path) -> tuple[Any, str, list[int]]:
    db_url = f"sqlite:///{tmp_path / 'docs.db'}"
    migrate(db_url)
    sessions = make_sessionmaker(make_engine(db_url))
    with sessions() as s:
        job = job_store.create_job(
            s,
            pipeline=extract.NAME,
            model="m",
            options={"json_schema": SCHEMA, "max_array_items": 3, "max_string_chars": 10},
            items=[job_store.NewItem(inputs={"path": str(inputs / n)}, ref=n) for n in names],
            chunk_size=10,
            output_dir=str(out),
        )
        job_id, chunk_ids = job.id, job_store.chunks_of(s, job_id=job.id)
        s.commit()
    return sessions, job_id, chunk_ids


def test_a_document_that_crashes_the_engine_fails_alone_and_the_other_is_written(
    tmp_path: Path, tiny_model: Path
) -> None:
    inputs, out = tmp_path / "inputs", tmp_path / "out"
    inputs.mkdir()
    _scanned_black(inputs / "scan.pdf")
    _notes(inputs / "notes.txt")
    sessions, job_id, chunk_ids = _document_job(tmp_path, inputs, ["scan.pdf", "notes.txt"], out)
    engines: list[ScriptedEngine] = []
    runner = scripted_runner([], engines, EngineConfig(model=str(tiny_model), max_model_len=1024))
    runner.load()
    ctx = scripted_context(sessions, runner, inputs, out, revision=None)
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


def test_a_document_holds_the_room_of_the_requests_its_round_has_in_the_engine(
    tmp_path: Path, tiny_model: Path
) -> None:
    """One back-pressure count for every kind: a document's map round of several passages fills a hold of
    four requests, so nothing more is claimed until its answers are back."""
    inputs, out = tmp_path / "inputs", tmp_path / "out"
    inputs.mkdir()
    _notes(inputs / "notes.txt")
    sessions, job_id, chunk_ids = _document_job(tmp_path, inputs, ["notes.txt"], out)
    gate = threading.Event()  # cleared: no request finishes
    runner = scripted_runner([], [], EngineConfig(model=str(tiny_model), max_model_len=1024), gate=gate)
    runner.load()
    feeder = Feeder(scripted_context(sessions, runner, inputs, out, revision=None), hold=4)
    assert feeder.add_chunk(chunk_ids[0]) is not None
    deadline = time.monotonic() + 60
    while runner.in_engine + runner.backlog < 4:
        assert time.monotonic() < deadline, "the map round never reached the engine"
        time.sleep(0.05)
    assert not feeder.wait_for_room(timeout=0.5)  # one item, but four requests or more in flight
    gate.set()
    assert feeder.wait_for_room(timeout=30)
    assert feeder.wait_idle(60)
    feeder.close()
    runner.close()
    with sessions() as s:
        assert job_store.item_counts(s, job_id=job_id)["succeeded"] == 1


def test_documents_that_all_crash_the_engine_open_the_breaker_and_none_fails(tmp_path: Path, tiny_model: Path) -> None:
    """The breaker holds for every kind: scans that each crash the engine, as every page image would on a broken
    deployment, fail no document; once the engine is healed they all finish."""
    from tests.support.scripted import Faults
    from vlbatch.db import engine_states
    from worker.embedded import run_job

    inputs, out = tmp_path / "inputs", tmp_path / "out"
    inputs.mkdir()
    names = [f"scan{i}.pdf" for i in range(4)]
    for n in names:
        _scanned_black(inputs / n)
    sessions, job_id, _ = _document_job(tmp_path, inputs, names, out)
    faults = Faults()
    engines: list[ScriptedEngine] = []
    runner = scripted_runner([], engines, EngineConfig(model=str(tiny_model), max_model_len=1024), faults=faults)
    runner.load()
    ctx = scripted_context(sessions, runner, inputs, out, revision=None)
    ctx.settings = ctx.settings.model_copy(update={"breaker_backoff_s": 4.0, "breaker_backoff_max_s": 4.0})
    errors: list[BaseException] = []

    def run() -> None:
        try:
            run_job(ctx, job_id, sample_every_s=0.1, give_up=False)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    while True:
        with sessions() as s:
            if engine_states.stalled_reason(s, model="m"):
                break
        assert time.monotonic() < deadline, "the breaker never opened"
        time.sleep(0.02)
    assert len(engines) <= 4  # K+1 loads at most, K = 3
    with sessions() as s:
        items = list(s.scalars(select(Item).where(Item.job_id == job_id)))
    assert [(i.status, i.crash_count) for i in items] == [("queued", 0)] * 4
    faults.poison_colours = []
    thread.join(120)
    assert not thread.is_alive() and not errors, errors
    runner.close()
    with sessions() as s:
        items = list(s.scalars(select(Item).where(Item.job_id == job_id)))
    assert [(i.status, i.crash_count) for i in items] == [("succeeded", 0)] * 4

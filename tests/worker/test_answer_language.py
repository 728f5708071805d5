"""The tagging option ``language`` through the feeder, on the product's stub engine over a real database: an answer
in another language is asked for once more (one more round of the item, the same image), then kept with an
``answer_language_mismatch`` warning; an answer in the asked language takes one round."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from sqlalchemy import select

from engine.runtime.config import EngineConfig
from engine.runtime.stub import StubConfig
from pipelines import image_tagging
from tests.support.scripted import CHAT, ScriptedEngine, scripted_runner
from vlbatch.db import job_store
from vlbatch.db.models import Result
from vlbatch.db.session import make_engine, make_sessionmaker, migrate
from vlbatch.errors import ANSWER_LANGUAGE_MISMATCH
from vlbatch.settings import Settings
from worker.context import WorkerContext
from worker.feeder import Feeder

pytestmark = pytest.mark.timeout(180)

ENGLISH = json.dumps({"tags": ["wedding", "family", "mountain lake", "church"], "caption": "A wedding by a lake."})
GERMAN = json.dumps({"tags": ["Hochzeit", "Familie", "Kirche", "Landschaft"], "caption": "Eine Hochzeit am See."})
AGAIN = "Your earlier answer"  # what the second round's prompt holds (pipelines/tagging_language.py)


def _run(db_url: str, tmp_path: Path, stub: StubConfig, options: dict[str, Any]) -> tuple[list[str], Result]:
    """One photo tagged with ``options``; the requests the engine saw (by id) and the stored result."""
    migrate(db_url)
    sessions = make_sessionmaker(make_engine(db_url))
    album = tmp_path / "album"
    album.mkdir()
    photo = album / "lake.png"
    Image.new("RGB", (56, 56), (40, 120, 200)).save(photo)
    with sessions() as s:
        job = job_store.create_job(
            s,
            pipeline=image_tagging.NAME,
            model="m",
            options=options,
            items=job_store.items_from_paths([str(photo)], images_per_prompt=1),
            chunk_size=1,
        )
        s.commit()
        (chunk,) = job_store.chunks_of(s, job_id=job.id)
    steps: list[list[str]] = []
    engines: list[ScriptedEngine] = []
    runner = scripted_runner(steps, engines, EngineConfig(model="scripted", max_num_seqs=2), faults=stub)
    runner.load()
    ctx = WorkerContext(
        settings=Settings(allowed_input_roots=[album]),
        sessions=sessions,
        runner=runner,
        model_name="m",
        chat=CHAT,
        owner="w1",
        pool=ThreadPoolExecutor(2),
        model_revision="rev1",
    )
    feeder = Feeder(ctx)
    try:
        feeder.add_chunk(chunk)
        assert feeder.wait_idle(120)
    finally:
        feeder.close()
        runner.close()
    with sessions() as s:
        (result,) = s.scalars(select(Result).where(Result.job_id == job.id))
    return sorted({rid for step in steps for rid in step}), result


def test_an_answer_in_another_language_is_asked_again_then_kept_with_a_warning(db_url: str, tmp_path: Path) -> None:
    stub = StubConfig(answer=ENGLISH, schema_answers=False)  # English whatever it is asked
    asked, result = _run(db_url, tmp_path, stub, {"language": "de", "caption": True})
    assert len(asked) == 2 and asked[1] == f"{asked[0]}-again"  # one more round, no more
    assert result.output is not None
    assert result.output["tags"] == ["wedding", "family", "mountain lake", "church"]
    (warning,) = result.output["warnings"]
    assert warning["code"] == ANSWER_LANGUAGE_MISMATCH
    assert "German ('de')" in warning["message"] and '"wedding"' in warning["message"]
    # both rounds' tokens are the item's
    assert result.completion_tokens == 2 * -(-len(ENGLISH) // stub.chars_per_token)


def test_a_second_answer_in_the_asked_language_is_kept_without_a_warning(db_url: str, tmp_path: Path) -> None:
    stub = StubConfig(answer=ENGLISH, answers={AGAIN: GERMAN}, schema_answers=False)
    asked, result = _run(db_url, tmp_path, stub, {"language": "de", "caption": True})
    assert len(asked) == 2
    assert result.output is not None and "warnings" not in result.output
    assert result.output["tags"] == ["hochzeit", "familie", "kirche", "landschaft"]
    assert result.output["caption"] == "Eine Hochzeit am See."


def test_an_answer_in_the_asked_language_takes_one_round(db_url: str, tmp_path: Path) -> None:
    stub = StubConfig(answer=GERMAN, answers={AGAIN: ENGLISH}, schema_answers=False)
    asked, result = _run(db_url, tmp_path, stub, {"language": "de", "caption": True})
    assert len(asked) == 1
    assert result.output is not None and "warnings" not in result.output
    assert result.output["tags"][0] == "hochzeit"


def test_an_english_job_is_not_checked(db_url: str, tmp_path: Path) -> None:
    stub = StubConfig(answer=GERMAN, schema_answers=False)  # German, and English is the default language
    asked, result = _run(db_url, tmp_path, stub, {"caption": True, "language": "en"})
    assert len(asked) == 1
    assert result.output is not None and "warnings" not in result.output

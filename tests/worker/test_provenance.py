"""A result's provenance, made by a job run through the feeder on the product's stub engine over a real database:
the prompt's hash is sha256 of the prompt text the engine was given, the model's revision is the worker's, a
duplicate's reused answer keeps the hash of the prompt that made it, and the sidecars carry all of it where
exiftool reads it."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from sqlalchemy import select

from engine.runtime.config import EngineConfig
from engine.runtime.runner import EngineRunner
from engine.runtime.stub import StubConfig, StubEngine
from jobs.exports.xmp import write_job_sidecars
from pipelines import image_tagging
from tests.support.exiftool import exiftool_tags
from tests.support.scripted import scripted_context
from vlbatch.db import job_store
from vlbatch.db.models import Item, Result
from vlbatch.db.session import make_engine, make_sessionmaker, migrate
from worker.feeder import Feeder

pytestmark = pytest.mark.timeout(180)

ANSWER = json.dumps({"tags": ["lake", "boat"], "caption": "A boat on a lake."})


def _prompts_of(engine: StubEngine, seen: list[str]) -> StubEngine:
    """The engine, noting the prompt text of every request it is given."""
    add = engine.add_request

    def noted(request_id: str, prompt: dict[str, Any], params: Any) -> None:
        seen.append(prompt["prompt"])
        add(request_id, prompt, params)

    engine.add_request = noted  # type: ignore[method-assign]
    return engine


def test_a_result_keeps_the_hash_of_the_prompt_the_engine_was_given(db_url: str, tmp_path: Path) -> None:
    migrate(db_url)
    sessions = make_sessionmaker(make_engine(db_url))
    album = tmp_path / "album"
    album.mkdir()
    photo = album / "lake.jpg"
    Image.new("RGB", (56, 56), (40, 120, 200)).save(photo, format="JPEG")
    shutil.copy(photo, album / "copy.jpg")  # the same bytes: reused, not asked again
    with sessions() as s:
        job = job_store.create_job(
            s,
            pipeline=image_tagging.NAME,
            model="m",
            options={"caption": True, "max_tags": 5},
            items=job_store.items_from_paths([str(photo), str(album / "copy.jpg")], images_per_prompt=1),
            chunk_size=2,
        )
        s.commit()
        (chunk,) = job_store.chunks_of(s, job_id=job.id)
        options_hash = job.options_hash
    prompts: list[str] = []
    stub = StubConfig(answer=ANSWER, schema_answers=False)
    runner = EngineRunner(
        EngineConfig(model="scripted", max_num_seqs=1), engine_factory=lambda: _prompts_of(StubEngine(stub), prompts)
    )
    runner.load()
    feeder = Feeder(scripted_context(sessions, runner, album, revision="rev7"))
    try:
        feeder.add_chunk(chunk)
        assert feeder.wait_idle(120)
    finally:
        feeder.close()
        runner.close()

    (prompt,) = prompts  # one request: the copy took the first photo's answer
    with sessions() as s:
        rows = s.execute(
            select(Item.ref, Result).join(Result, Result.item_id == Item.id).where(Item.job_id == job.id)
        ).all()
        # Either photo may be the one answered; the other takes its answer.
        (first,) = [result for _, result in rows if result.reused_from is None]
        (copy,) = [result for _, result in rows if result.reused_from is not None]
        photo = album / Path(str(next(ref for ref, result in rows if result is first))).name
        assert first.prompt_hash == hashlib.sha256(prompt.encode()).hexdigest()
        assert (first.model, first.model_revision, first.options_hash) == ("m", "rev7", options_hash)
        assert first.pipeline_version == image_tagging.VERSION
        assert copy.reused_from == first.item_id and copy.prompt_hash == first.prompt_hash
        assert copy.model_revision == "rev7"

        report = write_job_sidecars(s, job_id=job.id)
    assert report.written == 2
    got = exiftool_tags(photo.with_name(f"{photo.name}.xmp"))
    assert (got["XMP-vlbatch:Model"], got["XMP-vlbatch:ModelRevision"]) == ("m", "rev7")
    assert (got["XMP-vlbatch:PromptHash"], got["XMP-vlbatch:OptionsHash"]) == (first.prompt_hash, options_hash)
    assert str(got["XMP-vlbatch:PipelineVersion"]) == first.pipeline_version

"""Duplicates run once, through the feeder with a scripted engine over a real database (SQLite and PostgreSQL):
byte copies within a job and across jobs of one tenant take the answer of the item the engine answered
(``reused_from``) with no engine request; another model revision, pipeline version, options or tenant, or the job
option ``reuse: false``, asks the engine again."""

from __future__ import annotations

import hashlib
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from PIL import Image
from sqlalchemy import select

from api.routes.results import result_out
from engine.runtime.config import EngineConfig
from pipelines import image_tagging
from tests.support.scripted import CHAT, ScriptedEngine, scripted_runner
from vlbatch.db import job_store
from vlbatch.db.models import Item, Result
from vlbatch.db.results import result_of
from vlbatch.db.session import make_engine, make_sessionmaker, migrate
from vlbatch.settings import Settings
from worker.context import WorkerContext
from worker.feeder import Feeder

pytestmark = pytest.mark.timeout(120)


class _Album:
    """Three distinct photos and byte copies of the first, and a way to run a job over some of them."""

    def __init__(self, db_url: str, tmp_path: Path) -> None:
        migrate(db_url)
        self.sessions = make_sessionmaker(make_engine(db_url))
        self.root = tmp_path / "album"
        self.root.mkdir()
        for name, colour in (("a", (200, 30, 30)), ("b", (30, 200, 30)), ("c", (30, 30, 200))):
            Image.new("RGB", (56, 56), colour).save(self.root / f"{name}.png")
        for copy in ("a_copy1", "a_copy2", "a_copy3"):
            shutil.copyfile(self.root / "a.png", self.root / f"{copy}.png")
        self.steps: list[list[str]] = []  # every engine step's running requests, across runs
        self.engines: list[ScriptedEngine] = []

    def asked(self) -> set[str]:
        """Request ids the engine has run so far."""
        return {rid for step in self.steps for rid in step}

    def run(
        self, names: list[str], *, tenant: str = "t1", revision: str = "rev1", chunk_size: int = 8, **options: object
    ) -> dict[str, Result]:
        """A job over ``names`` run to its end through a feeder; its results by photo name."""
        opts = image_tagging.TaggingOptions.model_validate({"max_tags": 3, **options}).model_dump()
        paths = [str(self.root / f"{n}.png") for n in names]
        with self.sessions() as s:
            job = job_store.create_job(
                s,
                pipeline=image_tagging.NAME,
                model="m",
                options=opts,
                items=job_store.items_from_paths(paths, images_per_prompt=1),
                chunk_size=chunk_size,
                tenant=tenant,
            )
            s.commit()
            chunk_ids = job_store.chunks_of(s, job_id=job.id)
        runner = scripted_runner(self.steps, self.engines, EngineConfig(model="scripted", max_num_seqs=8))
        runner.load()
        ctx = WorkerContext(
            settings=Settings(allowed_input_roots=[self.root]),
            sessions=self.sessions,
            runner=runner,
            model_name="m",
            chat=CHAT,
            pool=ThreadPoolExecutor(4),
            model_revision=revision,
        )
        feeder = Feeder(ctx)
        try:
            for cid in chunk_ids:
                feeder.add_chunk(cid)
            assert feeder.wait_idle(60)
        finally:
            feeder.close()
            runner.close()
            ctx.pool.shutdown()
        with self.sessions() as s:
            rows = s.execute(select(Item, Result).join(Result, Result.item_id == Item.id).where(Item.job_id == job.id))
            found = {Path(item.inputs["images"][0]).stem: result for item, result in rows}
            self.errors = {
                Path(item.inputs["images"][0]).stem: item.error_code
                for item in s.scalars(select(Item).where(Item.job_id == job.id))
            }
        assert sorted(found) == sorted(set(names))
        return found


def test_copies_run_once_within_a_job_and_across_the_tenants_jobs(db_url: str, tmp_path: Path) -> None:
    album = _Album(db_url, tmp_path)
    first = album.run(["a", "b", "a_copy1", "c", "a_copy2"])
    assert set(album.errors.values()) == {None}
    assert len(album.asked()) == 3  # a, b and c; the copies of a asked nothing
    copies = [first[n] for n in ("a", "a_copy1", "a_copy2")]
    answered = [r for r in copies if r.reused_from is None]
    assert len(answered) == 1  # one of the copies was answered, whichever the pool reached first
    origin = answered[0]
    sha = hashlib.sha256((album.root / "a.png").read_bytes()).hexdigest()
    for r in copies:
        assert r.content_hash == sha
        assert r.output == origin.output and r.raw_text == origin.raw_text
        # the processed-with marker is the copy's own job's, which is the origin's (invariant 7)
        assert (r.model, r.model_revision, r.pipeline_version, r.options_hash) == (
            origin.model,
            origin.model_revision,
            origin.pipeline_version,
            origin.options_hash,
        )
        if r is not origin:
            assert r.reused_from == origin.item_id and (r.prompt_tokens, r.completion_tokens) == (0, 0)
    assert first["b"].reused_from is None and first["c"].reused_from is None
    with album.sessions() as s:  # the API and the exports show it
        record = result_of(s, item_id=next(r.item_id for r in copies if r is not origin))
        assert record is not None and result_out(record).reused_from == origin.item_id

    # A later job of the same tenant: the copy and b are answered from the first job's results, and a copy of a
    # copy names the item the engine answered, not the copy.
    later = album.run(["a_copy3", "b"])
    assert len(album.asked()) == 3
    assert later["a_copy3"].reused_from == origin.item_id
    assert later["b"].reused_from == first["b"].item_id

    # reuse off: the engine is asked again, and the answer is stored with its hash for later jobs to reuse
    fresh = album.run(["a_copy3"], reuse=False)
    assert len(album.asked()) == 4 and fresh["a_copy3"].reused_from is None
    assert fresh["a_copy3"].content_hash == sha and fresh["a_copy3"].options_hash == origin.options_hash


def test_another_revision_version_options_or_tenant_never_reuses(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    album = _Album(db_url, tmp_path)
    album.run(["a"])
    assert len(album.asked()) == 1
    runs = {
        "another model revision": lambda: album.run(["a_copy1"], revision="rev2"),
        "other options": lambda: album.run(["a_copy1"], max_tags=4),
        "another tenant": lambda: album.run(["a_copy1"], tenant="t2"),
    }
    for n, (why, run) in enumerate(runs.items(), start=2):
        result = run()["a_copy1"]
        assert result.reused_from is None, why
        assert len(album.asked()) == n, why
    monkeypatch.setattr(image_tagging.ImageTagging, "version", "2")
    result = album.run(["a_copy1"])["a_copy1"]
    assert result.reused_from is None and result.pipeline_version == "2"
    assert len(album.asked()) == 5
    # and the same marker and tenant still reuses (the runs above did not break it)
    monkeypatch.undo()
    assert album.run(["a_copy2"])["a_copy2"].reused_from is not None
    assert len(album.asked()) == 5


def test_a_context_the_bytes_do_not_hold_turns_reuse_off(db_url: str, tmp_path: Path) -> None:
    """Told its file name (or album, or keywords), a copy's prompt is not its original's: the engine answers each.
    Facts read from the bytes (date, camera) are the copy's too, so copies still run once."""
    album = _Album(db_url, tmp_path)
    named = album.run(["a", "a_copy1"], context=["filename"])
    assert len(album.asked()) == 2 and {r.reused_from for r in named.values()} == {None}
    assert named["a"].prompt_hash != named["a_copy1"].prompt_hash
    dated = album.run(["a", "a_copy1"], context=["date", "camera"])
    assert len(album.asked()) == 3 and sorted(r.reused_from is None for r in dated.values()) == [False, True]


def test_copies_of_a_photo_that_fails_each_fail_on_their_own(tmp_path: Path) -> None:
    album = _Album(f"sqlite:///{tmp_path / 'reuse.db'}", tmp_path)
    broken = (album.root / "a.png").read_bytes()[:60]  # the header, then nothing: no decoder reads it
    for name in ("x", "x_copy1", "x_copy2"):
        (album.root / f"{name}.png").write_bytes(broken)
    results = album.run(["x", "x_copy1", "x_copy2", "b"])
    assert album.errors == {"x": "decode_error", "x_copy1": "decode_error", "x_copy2": "decode_error", "b": None}
    assert all(r.reused_from is None for r in results.values())  # a failure is never handed on
    assert len(album.asked()) == 1

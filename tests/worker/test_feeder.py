"""The feeder with a scripted engine over a real database (SQLite and PostgreSQL): the engine is kept full
across small chunks, results are written in batches, leases are renewed while held, and a stop hands
unfinished chunks back. The real engine runs the same code in tests/e2e."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path

import pytest
from PIL import Image
from sqlalchemy import event, select

from engine.runtime.config import EngineConfig
from pipelines import image_tagging
from tests.support.scripted import CHAT, ScriptedEngine, scripted_runner
from vlbatch.db import job_store, leases, outcomes
from vlbatch.db.models import Chunk, Item, Job, Result
from vlbatch.db.session import make_engine, make_sessionmaker, migrate
from vlbatch.settings import Settings
from worker.context import WorkerContext
from worker.feeder import Feeder
from worker.leases import Leases

pytestmark = pytest.mark.timeout(120)


def _album(root: Path, n: int) -> list[str]:
    root.mkdir(exist_ok=True)
    paths = []
    for i in range(n):
        path = root / f"{i:03d}.png"
        Image.new("RGB", (56, 56), (10 + i % 200, 100, 150)).save(path)
        paths.append(str(path))
    return paths


class _Setup:
    def __init__(self, db_url: str, tmp_path: Path, *, n: int, chunk_size: int, **settings: object) -> None:
        migrate(db_url)
        self.db = make_engine(db_url)
        self.sessions = make_sessionmaker(self.db)
        album = tmp_path / "album"
        paths = _album(album, n)
        with self.sessions() as s:
            self.job = job_store.create_job(
                s,
                pipeline=image_tagging.NAME,
                model="m",
                options=image_tagging.TaggingOptions(max_tags=3).model_dump(),
                items=job_store.items_from_paths(paths, images_per_prompt=1),
                chunk_size=chunk_size,
            )
            s.commit()
            self.chunk_ids = job_store.chunks_of(s, job_id=self.job.id)
        self.settings = Settings(allowed_input_roots=[album], **settings)  # type: ignore[arg-type]
        self.steps: list[list[str]] = []
        self.engines: list[ScriptedEngine] = []

    def context(self, runner_config: EngineConfig, owner: str = "w1", **engine: object) -> WorkerContext:
        runner = scripted_runner(self.steps, self.engines, runner_config, **engine)  # type: ignore[arg-type]
        runner.load()
        return WorkerContext(
            settings=self.settings,
            sessions=self.sessions,
            runner=runner,
            model_name="m",
            chat=CHAT,
            owner=owner,
            pool=ThreadPoolExecutor(2),
            model_revision="rev1",
        )


@pytest.fixture
def sqlite_url(tmp_path: Path) -> Iterator[str]:
    yield f"sqlite:///{tmp_path / 'feeder.db'}"


def test_engine_is_kept_full_across_chunks_smaller_than_a_batch(db_url: str, tmp_path: Path) -> None:
    setup = _Setup(db_url, tmp_path, n=60, chunk_size=2)
    config = EngineConfig(model="scripted", max_num_seqs=8, admit_ahead=4)
    gate = threading.Event()  # nothing finishes until the engine is full: the check does not race the clock
    ctx = setup.context(config, step_s=0.01, gate=gate)
    writes: list[str] = []  # statements that finish items (claims excluded)

    def _seen(conn: object, cursor: object, statement: str, *rest: object) -> None:
        # The per-job UPDATE (SQLite) or the one batch statement (PostgreSQL); a claim sets no position.
        if "written_seq=" in statement or "written_seq = pos.first" in statement:
            writes.append(statement)

    event.listen(setup.db, "before_cursor_execute", _seen)
    feeder = Feeder(ctx)
    adder = threading.Thread(target=lambda: [feeder.add_chunk(cid) for cid in setup.chunk_ids])
    adder.start()
    deadline = time.monotonic() + 30
    while ctx.runner.in_engine < config.admission_limit and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ctx.runner.in_engine == config.admission_limit  # 2-item chunks, yet the engine holds the full limit
    gate.set()
    adder.join(30)
    assert feeder.wait_idle(60)
    feeder.close()
    ctx.runner.close()
    assert max(len(batch) for batch in setup.steps) == config.admission_limit  # never more than the limit
    with setup.sessions() as s:
        counts = job_store.item_counts(s, job_id=setup.job.id)
        results = list(s.scalars(select(Result).where(Result.job_id == setup.job.id)))
        chunks = list(s.scalars(select(Chunk).where(Chunk.job_id == setup.job.id)))
        job = s.get(Job, setup.job.id)
    assert counts["succeeded"] == 60
    assert len(results) == 60 and {(r.model_revision, r.pipeline_version) for r in results} == {("rev1", "1")}
    assert all(c.done and c.lease_owner is None for c in chunks)
    assert job is not None and job.status == "finished"
    # Written in batches: far fewer item UPDATEs than items.
    assert 0 < len(writes) < 30, len(writes)
    occ = ctx.runner.occupancy()
    assert occ.steps > 0 and occ.capacity == 8


def test_leases_are_renewed_while_a_chunk_is_held(sqlite_url: str, tmp_path: Path) -> None:
    setup = _Setup(sqlite_url, tmp_path, n=4, chunk_size=4, lease_seconds=5)
    gate = threading.Event()
    ctx = setup.context(EngineConfig(model="scripted", max_num_seqs=4), gate=gate)
    feeder = Feeder(ctx)
    assert feeder.add_chunk(setup.chunk_ids[0]) is not None
    with setup.sessions() as s:
        first = s.get(Chunk, setup.chunk_ids[0])
        assert first is not None and first.lease_expires_at is not None
        initial = first.lease_expires_at
    time.sleep(7)  # past the 5 s lease: without renewal another worker could take the chunk
    with setup.sessions() as s:
        assert leases.claim_chunk(s, chunk_id=setup.chunk_ids[0], owner="w2", lease=timedelta(seconds=5)) == []
        chunk = s.get(Chunk, setup.chunk_ids[0])
        assert chunk is not None and chunk.lease_owner == "w1" and chunk.lease_expires_at > initial  # type: ignore[operator]
    gate.set()
    assert feeder.wait_idle(30)
    feeder.close()
    ctx.runner.close()


def test_stop_hands_unfinished_chunks_back_in_bounded_time(sqlite_url: str, tmp_path: Path) -> None:
    setup = _Setup(sqlite_url, tmp_path, n=6, chunk_size=3)
    gate = threading.Event()  # never set: generation does not finish
    ctx = setup.context(EngineConfig(model="scripted", max_num_seqs=8), gate=gate)
    feeder = Feeder(ctx)
    for cid in setup.chunk_ids:
        assert feeder.add_chunk(cid) is not None
    started = time.monotonic()
    handed_back = feeder.stop(drain_timeout_s=0.5)
    ctx.runner.close(abandon=True)
    assert time.monotonic() - started < 10
    assert sorted(handed_back) == sorted(setup.chunk_ids)
    assert feeder.add_chunk(setup.chunk_ids[0]) is None  # stopped: claims nothing more
    with setup.sessions() as s:
        chunks = list(s.scalars(select(Chunk).where(Chunk.job_id == setup.job.id)))
        assert all(c.lease_owner is None and c.enqueued_at is None and not c.done for c in chunks)
        assert job_store.item_counts(s, job_id=setup.job.id)["running"] == 6
        again = leases.claim_chunk(s, chunk_id=setup.chunk_ids[0], owner="w2", lease=timedelta(seconds=60))
        assert len(again) == 3  # another worker takes the items over


def test_a_job_of_an_unknown_pipeline_fails_its_items_with_a_code(sqlite_url: str, tmp_path: Path) -> None:
    setup = _Setup(sqlite_url, tmp_path, n=3, chunk_size=3)
    with setup.sessions() as s:
        job = s.get(Job, setup.job.id)
        assert job is not None
        job.pipeline = "no_such_pipeline"
        s.commit()
    ctx = setup.context(EngineConfig(model="scripted"))
    feeder = Feeder(ctx)
    assert feeder.add_chunk(setup.chunk_ids[0]) is not None
    assert feeder.wait_idle(30)
    feeder.close()
    ctx.runner.close()
    with setup.sessions() as s:
        codes = {i.error_code for i in s.scalars(select(Item).where(Item.job_id == setup.job.id))}
    assert codes == {"unknown_pipeline"}


def test_a_stalled_database_write_does_not_starve_the_engine(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Room is freed when answers come back, not when they are written: while the writer is stuck, the feeder
    # keeps claiming and the engine keeps running, up to 2 * hold items awaiting their write; then it waits.
    setup = _Setup(db_url, tmp_path, n=80, chunk_size=4)
    config = EngineConfig(model="scripted", max_num_seqs=4, admit_ahead=2)
    ctx = setup.context(config, step_s=0.002)
    stalled = threading.Event()
    release = threading.Event()
    real = outcomes.write_outcomes

    def stuck(*args: object, **kwargs: object) -> None:
        stalled.set()
        assert release.wait(60)
        real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(outcomes, "write_outcomes", stuck)
    feeder = Feeder(ctx, hold=8)
    adder = threading.Thread(target=lambda: [feeder.add_chunk(cid) for cid in setup.chunk_ids])
    adder.start()
    assert stalled.wait(30)
    deadline = time.monotonic() + 30
    while feeder.held_items < 2 * feeder.hold and time.monotonic() < deadline:
        time.sleep(0.01)
    engine_saw = len({rid for batch in setup.steps for rid in batch})  # distinct requests run while stalled
    held_while_stalled = feeder.held_items
    time.sleep(0.3)  # nothing more is claimed while 2 * hold items wait for their write
    assert feeder.held_items == held_while_stalled
    release.set()
    adder.join(30)
    assert feeder.wait_idle(60)
    feeder.close()
    ctx.runner.close()
    # The old rule (room freed by the write) stopped at hold = 8 items; the engine went on to 2 * hold.
    assert held_while_stalled >= 2 * feeder.hold
    assert held_while_stalled <= 2 * feeder.hold + 4  # at most one chunk over: the claim that crossed the line
    assert engine_saw > feeder.hold
    with setup.sessions() as s:
        assert job_store.item_counts(s, job_id=setup.job.id)["succeeded"] == 80


def test_chunks_end_with_the_writes_of_their_last_items(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A chunk's end is no transaction of its own: the write of its last items makes it (the job's end too), so the
    # feeder never calls a separate finish, and every chunk is done, the job finished, each item written once.
    setup = _Setup(db_url, tmp_path, n=24, chunk_size=3)
    ctx = setup.context(EngineConfig(model="scripted", max_num_seqs=4), step_s=0.002)
    separate: list[int] = []
    monkeypatch.setattr(Leases, "finish", lambda _self, chunk_id: separate.append(chunk_id))
    feeder = Feeder(ctx, write_batch=4, write_interval_s=0.05)  # many writes, chunks ending across them
    for cid in setup.chunk_ids:
        assert feeder.add_chunk(cid) is not None
    assert feeder.wait_idle(60)
    feeder.close()
    ctx.runner.close()
    assert separate == []
    with setup.sessions() as s:
        chunks = list(s.scalars(select(Chunk).where(Chunk.job_id == setup.job.id)))
        job = s.get(Job, setup.job.id)
        assert job_store.item_counts(s, job_id=setup.job.id)["succeeded"] == 24
        assert len(list(s.scalars(select(Result).where(Result.job_id == setup.job.id)))) == 24
    assert len(chunks) == 8 and all(c.done and c.lease_owner is None for c in chunks)
    assert job is not None and job.status == "finished"

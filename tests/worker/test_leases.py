"""The engine worker's claims in queue order, through the feeder and a scripted engine over a real database: the
messages come in the order the jobs were sent, and the jobs finish earliest deadline first. And what a claim that
leaves nothing to run answers: the job only of a chunk this worker holds, and a word when the chunk is another
model's."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
from PIL import Image
from sqlalchemy import update
from sqlalchemy.orm import Session

from engine.runtime.config import EngineConfig
from pipelines import image_tagging
from tests.support.db import queued_job
from tests.support.scripted import ScriptedEngine, scripted_context, scripted_runner
from vlbatch.db import job_store
from vlbatch.db.models import Chunk, Item, ItemStatus, Job, utcnow
from vlbatch.db.session import make_engine, make_sessionmaker, migrate
from worker.feeder import Feeder
from worker.leases import Leases
from worker.samples import FeederStats

pytestmark = pytest.mark.timeout(120)


def _job(s: Session, album: Path, *, name: str, deadline_in: timedelta) -> tuple[str, list[int]]:
    paths = []
    for i in range(6):
        path = album / f"{name}-{i}.png"
        Image.new("RGB", (56, 56), (10 + i, 100, 150)).save(path)
        paths.append(str(path))
    job = job_store.create_job(
        s,
        pipeline=image_tagging.NAME,
        model="m",
        options=image_tagging.TaggingOptions(max_tags=3).model_dump(),
        items=job_store.items_from_paths(paths, images_per_prompt=1),
        chunk_size=2,
    )
    job.deadline = utcnow() + deadline_in
    s.commit()
    return job.id, job_store.chunks_of(s, job_id=job.id)


def test_jobs_sent_in_reverse_deadline_order_finish_in_deadline_order(db_url: str, tmp_path: Path) -> None:
    migrate(db_url)
    sessions = make_sessionmaker(make_engine(db_url))
    album = tmp_path / "album"
    album.mkdir()
    with sessions() as s:  # submitted, and so sent, latest deadline first
        day, day_chunks = _job(s, album, name="day", deadline_in=timedelta(hours=24))
        two, two_chunks = _job(s, album, name="two", deadline_in=timedelta(hours=2))
        half, half_chunks = _job(s, album, name="half", deadline_in=timedelta(minutes=30))
    steps: list[list[str]] = []
    engines: list[ScriptedEngine] = []
    runner = scripted_runner(steps, engines, EngineConfig(model="scripted", max_num_seqs=2), step_s=0.01)
    runner.load()
    ctx = scripted_context(sessions, runner, album)
    # Room for one chunk at a time, each chunk's outcomes written as soon as they are back: one claim per turn.
    feeder = Feeder(ctx, hold=2, write_batch=2, in_queue_order=True)
    claimed = []
    for delivered in day_chunks + two_chunks + half_chunks:  # the broker's order
        ticket = feeder.add_chunk(delivered)
        assert ticket is not None
        claimed.append(ticket.chunk_id)
    assert feeder.wait_idle(60)
    feeder.close()
    runner.close()
    with sessions() as s:
        claimed_jobs = [s.get(Chunk, c).job_id for c in claimed]  # type: ignore[union-attr]
        finished = {j: s.get(Job, j).finished_at for j in (half, two, day)}  # type: ignore[union-attr]
    assert claimed_jobs == [half] * 3 + [two] * 3 + [day] * 3
    assert claimed == half_chunks + two_chunks + day_chunks
    assert finished[half] < finished[two] < finished[day]  # type: ignore[operator]


def test_a_claim_with_nothing_to_run_returns_the_job_only_of_a_chunk_this_worker_holds(
    db_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sessions, job_id = queued_job(db_url, n=4, chunk=2)  # model "m": the one the context serves
    _, other_id = queued_job(db_url, n=2, chunk=2, model="other")
    with sessions() as s:
        done, taken = job_store.chunks_of(s, job_id=job_id)
        (foreign,) = job_store.chunks_of(s, job_id=other_id)
        s.execute(update(Item).where(Item.chunk_id == done).values(status=ItemStatus.SUCCEEDED))
        held_elsewhere = {"lease_owner": "w2", "lease_expires_at": utcnow() + timedelta(minutes=5)}
        s.execute(update(Chunk).where(Chunk.id == taken).values(**held_elsewhere))
        s.commit()
    closed = threading.Event()
    leases = Leases(
        scripted_context(sessions, scripted_runner([], []), tmp_path), FeederStats(), held=list, closed=closed
    )
    try:
        with caplog.at_level("WARNING", logger="worker.leases"):
            leased, items, job = leases.claim(done)  # leased by w1, every item written: w1 must still finish it
            assert (leased, items) == (done, []) and job is not None and job.id == job_id
            assert leases.claim(taken) == (taken, [], None)  # w2's lease holds
            assert not caplog.messages
            assert leases.claim(foreign) == (foreign, [], None)
        assert caplog.messages == [f"chunk {foreign} is for model 'other'; this worker serves 'm': not claimed"]
    finally:
        closed.set()
        leases.join()


def test_two_tasks_whose_claims_cross_in_queue_order_both_finish_their_chunks(db_url: str, tmp_path: Path) -> None:
    """Task 1 is delivered a chunk of a later job and leases the first chunk of the urgent one (queue order);
    task 2, delivered that first chunk before task 1 has filed its ticket under it, leases the urgent job's second.
    Each ticket must end up filed under the chunk it leased: a ticket lost from the feeder's books never settles
    its items, and the worker stalls."""
    migrate(db_url)
    sessions = make_sessionmaker(make_engine(db_url))
    album = tmp_path / "album"
    album.mkdir()
    with sessions() as s:
        _, (last, *later) = _job(s, album, name="day", deadline_in=timedelta(hours=24))
        _, (first, second, third) = _job(s, album, name="hour", deadline_in=timedelta(hours=1))
    steps: list[list[str]] = []
    runner = scripted_runner(steps, [], EngineConfig(model="scripted", max_num_seqs=2), step_s=0.01)
    runner.load()
    ctx = scripted_context(sessions, runner, album)
    feeder = Feeder(ctx, hold=8, write_batch=2, in_queue_order=True)
    claim = feeder._leases.claim
    one_claimed, two_inside = threading.Event(), threading.Event()

    def crossing(chunk_id: int) -> tuple[int, list[Item], Job | None]:
        # The interleaving is offered, not forced: a feeder that claims one at a time never lets task 2 in here
        # before task 1's ticket is filed, and each wait below then ends on its timeout.
        if chunk_id == last:  # task 1: leases the urgent job's first chunk, then lets task 2 in before filing
            got = claim(chunk_id)
            one_claimed.set()
            two_inside.wait(2)
            return got
        mine = feeder._tickets.get(chunk_id)  # task 2's reservation under the first chunk, if it made one
        two_inside.set()
        got = claim(chunk_id)
        deadline = time.monotonic() + 2
        while feeder._tickets.get(chunk_id) is mine and time.monotonic() < deadline:
            time.sleep(0.01)  # until task 1 has filed its ticket under the first chunk
        return got

    feeder._leases.claim = crossing  # type: ignore[method-assign]
    tickets: dict[str, int | None] = {}

    def task(name: str, delivered: int) -> None:
        ticket = feeder.add_chunk(delivered)
        tickets[name] = None if ticket is None else ticket.chunk_id

    one = threading.Thread(target=task, args=("one", last))
    one.start()
    assert one_claimed.wait(10)
    two = threading.Thread(target=task, args=("two", first))
    two.start()
    one.join(20)
    two.join(20)
    assert tickets["one"] == first and tickets["two"] in (first, second), tickets
    feeder._leases.claim = claim  # type: ignore[method-assign]
    for delivered in (first, second, third, last, *later):  # the reconciler's resends: whatever is left
        feeder.add_chunk(delivered)
    idle = feeder.wait_idle(30)
    feeder.close()
    runner.close()
    assert idle, "a ticket was lost: its items never settled"
    with sessions() as s:
        assert all(s.get(Chunk, c).done for c in (first, second, third, last, *later))  # type: ignore[union-attr]
    requests = {request for step in steps for request in step}  # item-<id>-<attempt>-<n>
    items = {request.rsplit("-", 2)[0] for request in requests}
    assert len(requests) == len(items), f"a photo went to the engine twice: {sorted(requests)}"

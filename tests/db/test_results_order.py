"""Results page in write order: items that finish out of seq order while a job runs are never skipped, a page
loop ends at what is written so far, and a follower resumes from its last position. SQLite and PostgreSQL."""

from __future__ import annotations

import random
import threading
from datetime import timedelta
from typing import Any

import pytest

from vlbatch.db import job_store, leases, outcomes
from vlbatch.db.models import Item
from vlbatch.db.results import list_results
from vlbatch.db.session import make_engine, make_sessionmaker, migrate

pytestmark = pytest.mark.timeout(120)


def _running_job(db_url: str, n: int) -> tuple[Any, str, list[int]]:
    """A job of ``n`` items, every chunk claimed (items running); returns the sessions, job id and item ids."""
    migrate(db_url)
    factory = make_sessionmaker(make_engine(db_url))
    with factory() as s:
        job = job_store.create_job(
            s,
            pipeline="image_tagging",
            model="m",
            options={},
            items=[job_store.NewItem(inputs={"images": [f"{i}.jpg"]}) for i in range(n)],
            chunk_size=4,
        )
        s.commit()
        for cid in job_store.chunks_of(s, job_id=job.id):
            leases.claim_chunk(s, chunk_id=cid, owner="w", lease=timedelta(minutes=5))
        s.commit()
        ids = [i.id for i in sorted(s.query(Item).filter(Item.job_id == job.id), key=lambda i: i.seq)]
        return factory, job.id, ids


def _finish(factory: Any, job_id: str, item_ids: list[int], *, failed: bool = False) -> None:
    done = [
        outcomes.Outcome(
            item_id=i,
            job_id=job_id,
            output=None if failed else {"tags": ["x"]},
            raw_text="{}",
            prompt_tokens=1,
            completion_tokens=1,
            error_code="bad_image" if failed else None,
            error_message="bad" if failed else None,
        )
        for i in item_ids
    ]
    marker = outcomes.Marker(model="m", model_revision=None, pipeline_version="1", options_hash="h")
    with factory() as s:
        outcomes.record_outcomes(s, outcomes=done, markers={job_id: marker})
        s.commit()


class Follower:
    """A client of the results pages: pages until a short page, then resumes from its last position."""

    def __init__(self, factory: Any, job_id: str, limit: int = 2) -> None:
        self.factory, self.job_id, self.limit = factory, job_id, limit
        self.position = -1
        self.seen: list[int] = []

    def read(self) -> None:
        for _ in range(10_000):  # bounded: a page loop that never ends fails here instead of spinning
            with self.factory() as s:
                rows = list_results(s, job_id=self.job_id, after_written=self.position, limit=self.limit)
                for written_seq, record in rows:
                    assert written_seq is not None and written_seq > self.position
                    self.position = written_seq
                    self.seen.append(record.item_id)
            if len(rows) < self.limit:
                return
        pytest.fail("the result pages never ended")


def test_items_finishing_out_of_seq_order_are_each_read_once(db_url: str) -> None:
    factory, job_id, ids = _running_job(db_url, 12)
    reader = Follower(factory, job_id)
    for batch in ([ids[7], ids[2], ids[9]], [ids[11]], [ids[0], ids[5]], [ids[1], ids[3], ids[4]]):
        _finish(factory, job_id, batch)
        reader.read()  # a seq cursor at ids[9] would never see ids[0..8] finished after it
    _finish(factory, job_id, [ids[6], ids[8], ids[10]], failed=True)
    reader.read()
    assert sorted(reader.seen) == ids and len(reader.seen) == len(set(reader.seen))
    reader.read()
    assert len(reader.seen) == len(ids)  # nothing new: nothing read twice


def test_a_retried_item_is_read_again_when_it_finishes_again(db_url: str) -> None:
    factory, job_id, ids = _running_job(db_url, 4)
    _finish(factory, job_id, ids[:3])
    _finish(factory, job_id, [ids[3]], failed=True)
    reader = Follower(factory, job_id)
    reader.read()
    assert sorted(reader.seen) == ids
    with factory() as s:
        chunk_ids = job_store.retry_failed(s, job_id=job_id)
        s.commit()
        assert s.get(Item, ids[3]).written_seq is None  # queued again: not a result until it finishes
        for cid in chunk_ids:
            leases.claim_chunk(s, chunk_id=cid, owner="w", lease=timedelta(minutes=5))
        s.commit()
    reader.read()
    assert len(reader.seen) == 4
    _finish(factory, job_id, [ids[3]])
    reader.read()
    assert reader.seen[-1] == ids[3] and len(reader.seen) == 5


def test_concurrent_writers_never_leave_an_item_behind_a_follower(db_url: str) -> None:
    if not db_url.startswith("postgresql"):
        pytest.skip("SQLite has one writer at a time: no concurrent commits to order")
    factory, job_id, ids = _running_job(db_url, 120)
    rng = random.Random(3)
    shuffled = ids[:]
    rng.shuffle(shuffled)
    halves = [shuffled[::2], shuffled[1::2]]
    reader = Follower(factory, job_id, limit=7)
    done = threading.Event()

    def write(mine: list[int]) -> None:
        for start in range(0, len(mine), 3):
            _finish(factory, job_id, mine[start : start + 3])

    writers = [threading.Thread(target=write, args=(h,)) for h in halves]
    for w in writers:
        w.start()

    def follow() -> None:
        while not done.is_set():
            reader.read()

    follower = threading.Thread(target=follow)
    follower.start()
    for w in writers:
        w.join(60)
    done.set()
    follower.join(60)
    reader.read()
    assert sorted(reader.seen) == ids and len(reader.seen) == len(ids)


def test_lines_refused_at_creation_are_results_with_positions_before_the_rest(db_url: str) -> None:
    from vlbatch.db import batches

    migrate(db_url)
    factory = make_sessionmaker(make_engine(db_url))
    with factory() as s:
        job = batches.new_job(s, tenant="t", pipeline="chat", model="m", options={})
        lines = [
            batches.LineItem(ref=f"r{i}", inputs={"messages": []}, error_code="invalid_request" if i % 3 == 0 else None)
            for i in range(7)
        ]
        assert batches.add_items(s, job=job, lines=lines, chunk_size=4) == 7
        s.commit()
        job_id = job.id
        refused = [i.id for i in sorted(s.query(Item).filter(Item.job_id == job_id), key=lambda i: i.seq)][::3]
        for cid in job_store.chunks_of(s, job_id=job_id):
            leases.claim_chunk(s, chunk_id=cid, owner="w", lease=timedelta(minutes=5))
        s.commit()
        running = [i.id for i in s.query(Item).filter(Item.job_id == job_id, Item.status == "running")]
    reader = Follower(factory, job_id)
    reader.read()
    assert reader.seen == refused  # the three refused lines, at positions 0..2
    _finish(factory, job_id, running)
    reader.read()
    assert sorted(reader.seen[3:]) == sorted(running) and len(reader.seen) == 7

"""Streamed intake (``jobs.item_streams``, ``job_store.add_item_stream``): a stream is inserted a bounded batch at a
time, each written while the next is read and never read further ahead than that, with its chunks in order; a
refusal found mid-stream, or a write that fails, leaves nothing stored; on SQLite and PostgreSQL."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import func, select

from jobs.item_streams import ItemStream
from jobs.refusals import JobRefused
from jobs.request import JobRequest
from jobs.submit import insert
from vlbatch.db import job_store
from vlbatch.db.bulk import one_behind
from vlbatch.db.models import Chunk, Item, Job
from vlbatch.db.session import make_engine, make_sessionmaker, migrate
from vlbatch.errors import ITEMS_QUOTA_EXCEEDED, NO_INPUTS, TOO_MANY_ITEMS
from vlbatch.settings import Settings, TenantQuota


def _items(n: int, pulled: list[int]) -> Iterator[job_store.NewItem]:
    for i in range(n):
        pulled[0] += 1
        yield job_store.NewItem(inputs={"images": [f"/a/{i:05d}.jpg"]}, ref=f"r{i}")


@pytest.mark.parametrize(("n", "chunk", "batch"), [(17, 3, 5), (4000, 7, 500), (10, 10, 10)])
def test_a_stream_is_written_a_bounded_batch_at_a_time_with_its_chunks_in_order(
    db_url: str, monkeypatch: pytest.MonkeyPatch, n: int, chunk: int, batch: int
) -> None:
    migrate(db_url)
    sessions = make_sessionmaker(make_engine(db_url))
    pulled, written, ahead, sizes = [0], [0], [], []
    write = job_store.write_item_rows

    def recorded(session, *, job_id, entries):  # type: ignore[no-untyped-def]
        sizes.append(len(entries))
        ahead.append(pulled[0] - written[0])  # items read from the stream and not yet written
        written[0] += len(entries)
        write(session, job_id=job_id, entries=entries)

    monkeypatch.setattr(job_store, "write_item_rows", recorded)
    with sessions() as s:
        job = job_store.new_job_row(
            s, tenant="t", pipeline="image_tagging", model="m", options={}, priority="batch", total=0
        )
        assert job_store.add_item_stream(s, job=job, items=_items(n, pulled), chunk_size=chunk, batch_items=batch) == n
        s.commit()
        job_id = job.id
    assert max(sizes) <= batch and sum(sizes) == n and len(sizes) == -(-n // batch)
    # the stream is never read more than two batches ahead of the table: one being written, the next being read
    assert max(ahead) <= 2 * batch
    with sessions() as s:
        rows = s.execute(
            select(Item.seq, Item.ref, Chunk.seq)
            .join(Chunk, Chunk.id == Item.chunk_id)
            .where(Item.job_id == job_id)
            .order_by(Item.seq)
        ).all()
        assert [(q, r) for q, r, _ in rows] == [(i, f"r{i}") for i in range(n)]
        assert [c for _, _, c in rows] == [i // chunk for i in range(n)]
        chunks = s.scalars(select(Chunk.seq).where(Chunk.job_id == job_id).order_by(Chunk.seq)).all()
        assert chunks == list(range(-(-n // chunk)))
        assert s.get(Job, job_id).total == n  # type: ignore[union-attr]


def _stream(n: int) -> ItemStream:
    return ItemStream(lambda: _items(n, [0]), empty=JobRefused(NO_INPUTS, "nothing in it"))


@pytest.mark.parametrize(
    ("settings_of", "n", "code"),
    [
        (lambda url: Settings(database_url=url, max_items_per_job=1200), 1500, TOO_MANY_ITEMS),
        (
            lambda url: Settings(database_url=url, tenant_quotas={"t": TenantQuota(max_items_per_job=900)}),
            1500,
            ITEMS_QUOTA_EXCEEDED,
        ),
        (lambda url: Settings(database_url=url), 0, NO_INPUTS),
    ],
)
def test_a_refusal_found_mid_stream_leaves_nothing_stored(db_url: str, settings_of, n: int, code: str) -> None:  # type: ignore[no-untyped-def]
    migrate(db_url)
    sessions = make_sessionmaker(make_engine(db_url))
    settings = settings_of(db_url)
    request = JobRequest(pipeline="image_tagging", options={}, items=_stream(n), model="m", tenant="t")
    with sessions() as s, pytest.raises(JobRefused) as refused:
        insert(s, settings, request)
    assert refused.value.code == code
    with sessions() as s:  # the session closed without a commit: its rows went with it
        assert s.scalar(select(func.count()).select_from(Job)) == 0
        assert s.scalar(select(func.count()).select_from(Item)) == 0
        assert s.scalar(select(func.count()).select_from(Chunk)) == 0


def test_a_folder_stream_makes_the_items_a_listed_folder_makes(tmp_path: Path) -> None:
    from jobs.new_items import image_items

    root = tmp_path / "album"
    for d in ["b", "a/x", "a.d", "c"]:
        (root / d).mkdir(parents=True)
    names = ["a/x/1.jpg", "a/2.JPG", "a.d/3.png", "a.jpg", "b/clip.mp4", "b/4.jpg", "c/5.jpg", "c/6.jpg", "0.png"]
    for name in names:
        (root / name).write_bytes(b"x")
    settings = Settings(allowed_input_roots=[root])
    stream = image_items(
        settings,
        roots=[root],
        inline=None,
        directory=str(root),
        recursive=True,
        images_per_prompt=2,
        videos=True,
        s3_prefixes=[],
    )
    assert isinstance(stream, ItemStream)
    assert list(stream) == list(stream.listed())  # the stream and the list a dry run reads agree, item for item
    # path order, component by component: images paired as they come, the clip last
    images = sorted((str(root / n) for n in names if not n.endswith(".mp4")), key=lambda p: p.replace("/", "\0"))
    assert [it.inputs["images"] for it in stream] == [images[k : k + 2] for k in range(0, 8, 2)] + [
        [str(root / "b/clip.mp4")]
    ]
    assert images[:3] == [str(root / "0.png"), str(root / "a/2.JPG"), str(root / "a/x/1.jpg")]


def test_a_write_that_fails_mid_stream_is_the_error_and_leaves_nothing_stored(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch is written on a thread of its own while the next is read: its error comes out of the insert, and
    the caller's rollback leaves nothing."""
    migrate(db_url)
    sessions = make_sessionmaker(make_engine(db_url))
    write = job_store.write_item_rows
    calls = [0]

    def fails_second(session, *, job_id, entries):  # type: ignore[no-untyped-def]
        calls[0] += 1
        if calls[0] == 2:
            raise OSError("the disk is full")
        write(session, job_id=job_id, entries=entries)

    monkeypatch.setattr(job_store, "write_item_rows", fails_second)
    with sessions() as s, pytest.raises(OSError, match="disk is full"):
        job = job_store.new_job_row(
            s, tenant="t", pipeline="image_tagging", model="m", options={}, priority="batch", total=0
        )
        job_store.add_item_stream(s, job=job, items=_items(50, [0]), chunk_size=4, batch_items=10)
    assert calls[0] == 2  # nothing written after the failed batch
    with sessions() as s:
        assert s.scalar(select(func.count()).select_from(Item)) == 0


def test_a_caller_error_waits_for_the_write_under_way() -> None:
    """``one_behind``: when the reading side raises, the write under way has ended before the error reaches the
    caller (whose rollback uses the session the write was using)."""
    started, ended = threading.Event(), threading.Event()

    def slow_write() -> None:
        started.set()
        time.sleep(0.2)
        ended.set()

    with pytest.raises(ValueError, match="bad line"), one_behind() as run:
        run(slow_write)
        started.wait(5)
        raise ValueError("bad line")
    assert ended.is_set()

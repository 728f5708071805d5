"""The outcome writer (``vlbatch.db.outcomes``): a redelivered item's outcome is written once, and a cancel wins over a
late result; the write of a chunk's last items finishes the chunk as ``leases.finish_chunk`` does (its owner only);
on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy import event, func, select, update

from tests.support.db import MARKER, outcome, queued_job, record
from vlbatch.db import job_store, leases, outcomes, tags, webhooks
from vlbatch.db.models import Chunk, Item, Job, Result, utcnow
from vlbatch.db.webhook_tables import WebhookDelivery


def test_redelivery_skips_done_items_and_results_stay_unique(db_url: str) -> None:
    factory, job_id = queued_job(db_url, n=4, chunk=4)
    with factory() as s:  # type: ignore[operator]
        cid = job_store.chunks_of(s, job_id=job_id)[0]
        items = leases.claim_chunk(s, chunk_id=cid, owner="A", lease=timedelta(seconds=60))
        assert record(s, outcome(items[0].id, job_id))
        assert record(s, outcome(items[1].id, job_id, error="decode_error"))
        assert not record(s, outcome(items[0].id, job_id))  # duplicate write is a no-op
        s.commit()
        # worker A dies; B takes the chunk over and gets only the two unfinished items
        again = leases.claim_chunk(s, chunk_id=cid, owner="A", lease=timedelta(seconds=60))
        assert [i.id for i in again] == [items[2].id, items[3].id]
        for it in again:
            record(s, outcome(it.id, job_id))
        leases.finish_chunk(s, chunk_id=cid, owner="A")
        s.commit()
        counts = job_store.item_counts(s, job_id=job_id)
        assert counts["succeeded"] == 3 and counts["failed"] == 1
        assert s.scalar(select(func.count()).select_from(Result)) == 4
        assert s.get(Job, job_id).status == "finished"  # type: ignore[union-attr]
        assert leases.claim_chunk(s, chunk_id=cid, owner="B", lease=timedelta(seconds=60)) == []


def test_cancel_wins_over_late_result(db_url: str) -> None:
    factory, job_id = queued_job(db_url, n=4, chunk=4)
    with factory() as s:  # type: ignore[operator]
        cid = job_store.chunks_of(s, job_id=job_id)[0]
        items = leases.claim_chunk(s, chunk_id=cid, owner="A", lease=timedelta(seconds=60))
        s.commit()
        assert job_store.cancel_job(s, job_id=job_id) == 4
        assert not record(s, outcome(items[0].id, job_id))
        s.commit()
        assert job_store.item_counts(s, job_id=job_id)["cancelled"] == 4
        assert s.scalar(select(func.count()).select_from(Result)) == 0


def test_one_batch_over_two_jobs_moves_running_items_once_with_positions_failures_and_edits(db_url: str) -> None:
    """The writer's one batch: items of two jobs, a failure, an item already finished and an item whose tags an
    operator edited before its rerun. Each moved item gets its own job's next position (increasing with its id);
    the finished one keeps its result and position; the failure keeps its code; the edit survives the rewrite."""
    factory, first = queued_job(db_url, n=3, chunk=3)
    with factory() as s:  # type: ignore[operator]
        second = job_store.create_job(
            s,
            pipeline="image_tagging",
            model="m",
            options={"a": 1},
            items=[job_store.NewItem(inputs={"images": ["x.jpg"]}) for _ in range(2)],
            chunk_size=2,
        ).id
        s.commit()
        claimed = {
            job_id: leases.claim_chunk(
                s, chunk_id=job_store.chunks_of(s, job_id=job_id)[0], owner="A", lease=timedelta(seconds=60)
            )
            for job_id in (first, second)
        }
        a, b, c = claimed[first]
        d, e = claimed[second]
        assert record(s, outcome(a.id, first))  # finished in an earlier batch
        tags.edit_tags(s, item_id=a.id, add=["kept by hand"], remove=[], author="op", max_edits=64)
        s.commit()
        moved = outcomes.record_outcomes(
            s,
            outcomes=[
                outcome(e.id, second),
                outcome(c.id, first),
                outcome(a.id, first),  # a redelivered duplicate: moves nothing
                outcome(b.id, first, error="decode_error"),
                outcome(d.id, second),
            ],
            markers={first: MARKER, second: MARKER},
        )
        s.commit()
        assert moved == sorted([b.id, c.id, d.id, e.id])
        seqs = {i.id: s.get(Item, i.id).written_seq for i in (a, b, c, d, e)}  # type: ignore[union-attr]
        assert seqs[a.id] is not None and seqs[a.id] < seqs[b.id] < seqs[c.id]  # type: ignore[operator]
        assert seqs[d.id] is not None and seqs[d.id] < seqs[e.id]  # type: ignore[operator]
        failed = s.get(Item, b.id)
        assert failed is not None and (failed.status, failed.error_code) == ("failed", "decode_error")
        assert s.get(Item, c.id).status == "succeeded"  # type: ignore[union-attr]
        kept = s.get(Result, a.id)
        assert kept is not None and [t["tag"] for t in kept.tags] == ["x", "kept by hand"]
        assert s.scalar(select(func.count()).select_from(Result)) == 5


def test_an_item_edited_before_its_rerun_keeps_the_edit_in_the_new_result(db_url: str) -> None:
    factory, job_id = queued_job(db_url, n=1, chunk=1)
    with factory() as s:  # type: ignore[operator]
        cid = job_store.chunks_of(s, job_id=job_id)[0]
        (item,) = leases.claim_chunk(s, chunk_id=cid, owner="A", lease=timedelta(seconds=60))
        assert record(s, outcome(item.id, job_id))
        tags.edit_tags(s, item_id=item.id, add=["by hand"], remove=["x"], author="op", max_edits=64)
        s.execute(update(Item).where(Item.id == item.id).values(status="running"))  # a rerun has it running again
        s.commit()
        assert record(s, outcome(item.id, job_id))
        s.commit()
        result = s.get(Result, item.id)
        assert result is not None
        s.refresh(result)
        assert [t["tag"] for t in result.tags] == ["by hand"]  # the model's "x" stays removed, the added one kept


def test_the_writers_call_commits_every_item_once_and_keeps_an_edit(db_url: str) -> None:
    """``write_outcomes`` (one statement on PostgreSQL, then the edited items in their own transaction): every
    running item is finished with its result and a position, the edited one keeps the person's tag, a duplicate
    in the batch is written once, and a retry of the whole call moves nothing again."""
    factory, job_id = queued_job(db_url, n=4, chunk=4)
    with factory() as s:  # type: ignore[operator]
        cid = job_store.chunks_of(s, job_id=job_id)[0]
        items = leases.claim_chunk(s, chunk_id=cid, owner="A", lease=timedelta(seconds=60))
        assert record(s, outcome(items[1].id, job_id))
        tags.edit_tags(s, item_id=items[1].id, add=["by hand"], remove=[], author="op", max_edits=64)
        s.execute(update(Item).where(Item.id == items[1].id).values(status="running"))  # rerun: running again
        s.commit()
    batch = [outcome(i.id, job_id) for i in items] + [outcome(items[0].id, job_id)]
    batch[2] = outcome(items[2].id, job_id, error="decode_error")
    moved: set[int] = set()
    outcomes.write_outcomes(factory, outcomes=batch, markers={job_id: MARKER}, moved=moved)
    assert moved == {i.id for i in items}
    with factory() as s:  # type: ignore[operator]
        rows = {i.id: s.get(Item, i.id) for i in items}
        assert [rows[i.id].status for i in items] == ["succeeded", "succeeded", "failed", "succeeded"]  # type: ignore[union-attr]
        assert rows[items[2].id].error_code == "decode_error"  # type: ignore[union-attr]
        seqs = [rows[i.id].written_seq for i in items]  # type: ignore[union-attr]
        assert None not in seqs and len(set(seqs)) == 4
        edited = s.get(Result, items[1].id)
        assert edited is not None and [t["tag"] for t in edited.tags] == ["x", "by hand"]
        plain = s.get(Result, items[0].id)
        assert plain is not None and plain.output == {"tags": ["x"]} and [t["tag"] for t in plain.tags] == ["x"]
        assert s.get(Result, items[2].id).output is None  # type: ignore[union-attr]
        assert s.scalar(select(func.count()).select_from(Result)) == 4
    again: set[int] = set()
    outcomes.write_outcomes(factory, outcomes=batch, markers={job_id: MARKER}, moved=again)
    assert again == set()


def _write(factory: Any, items: list[Item], job_id: str, *, finish: list[int], owner: str) -> tuple[set[int], set[int]]:
    """The writer's call for ``items`` (one success each), finishing ``finish`` as ``owner``: (moved, finished)."""
    moved: set[int] = set()
    finished: set[int] = set()
    batch = [outcome(i.id, job_id) for i in items]
    outcomes.write_outcomes(
        factory, outcomes=batch, markers={job_id: MARKER}, moved=moved, finish=finish, owner=owner, finished=finished
    )
    return moved, finished


def test_the_write_of_a_chunks_last_items_finishes_it_and_of_the_jobs_last_ends_the_job(db_url: str) -> None:
    """A chunk ends with the write of its last items: done, its lease gone, in the write's one statement on
    PostgreSQL; the job's last chunk also ends the job, with its webhook event."""
    factory, job_id = queued_job(db_url, n=8, chunk=4)
    with factory() as s:  # type: ignore[operator]
        webhooks.create_endpoint(
            s, tenant="default", url="https://a.example/h", events=["job.completed"], description=None
        )
        first, last = job_store.chunks_of(s, job_id=job_id)
        held = {c: leases.claim_chunk(s, chunk_id=c, owner="A", lease=timedelta(seconds=60)) for c in (first, last)}
        s.commit()
    statements: list[str] = []
    engine = factory.kw["bind"]  # type: ignore[attr-defined]
    event.listen(engine, "before_cursor_execute", lambda _c, _cur, sql, *_: statements.append(sql))
    moved, finished = _write(factory, held[first], job_id, finish=[first], owner="A")
    assert moved == {i.id for i in held[first]} and finished == {first}
    if engine.dialect.name == "postgresql":
        assert len(statements) == 1  # the results and the chunk's end: one round trip
    with factory() as s:  # type: ignore[operator]
        chunk, job = s.get(Chunk, first), s.get(Job, job_id)
        assert chunk is not None and chunk.done and chunk.lease_owner is None and chunk.lease_expires_at is None
        assert job is not None and job.status == "running" and job.finished_at is None
        assert s.scalar(select(func.count()).select_from(WebhookDelivery)) == 0
    moved, finished = _write(factory, held[last], job_id, finish=[last], owner="A")
    assert moved == {i.id for i in held[last]} and finished == {last}
    with factory() as s:  # type: ignore[operator]
        assert all(c.done and c.lease_owner is None for c in s.scalars(select(Chunk).where(Chunk.job_id == job_id)))
        job = s.get(Job, job_id)
        assert job is not None and job.status == "finished" and job.finished_at is not None
        assert [d.event for d in s.scalars(select(WebhookDelivery))] == ["job.completed"]
        assert job_store.item_counts(s, job_id=job_id)["succeeded"] == 8


def test_a_stale_owners_write_is_written_once_and_neither_finishes_nor_wipes_the_new_lease(db_url: str) -> None:
    """A's lease lapsed and B took the chunk over: A's late answers are written (the first write wins, one row
    each), but the finish in A's write leaves B's lease and the chunk as they are; B's write of the same items moves
    nothing and writes no second row, and B's finish ends the chunk and the job."""
    factory, job_id = queued_job(db_url, n=8, chunk=4)
    with factory() as s:  # type: ignore[operator]
        cid, other = job_store.chunks_of(s, job_id=job_id)
        items = leases.claim_chunk(s, chunk_id=cid, owner="A", lease=timedelta(seconds=60))
        s.execute(update(Chunk).where(Chunk.id == cid).values(lease_expires_at=utcnow() - timedelta(seconds=1)))
        assert leases.claim_chunk(s, chunk_id=cid, owner="B", lease=timedelta(seconds=60))
        s.commit()
    moved, finished = _write(factory, items, job_id, finish=[cid], owner="A")
    assert moved == {i.id for i in items} and finished == {cid}  # written, and the finish was refused
    with factory() as s:  # type: ignore[operator]
        chunk = s.get(Chunk, cid)
        assert chunk is not None and chunk.lease_owner == "B" and not chunk.done and chunk.lease_expires_at is not None
    moved, finished = _write(factory, items, job_id, finish=[cid], owner="B")
    assert moved == set() and finished == {cid}
    with factory() as s:  # type: ignore[operator]
        chunk = s.get(Chunk, cid)
        assert chunk is not None and chunk.done and chunk.lease_owner is None
        assert s.scalar(select(func.count()).select_from(Result)) == 4
        assert s.get(Job, job_id).status != "finished"  # type: ignore[union-attr]  # the other chunk is open
        s.execute(update(Item).where(Item.chunk_id == other).values(status="succeeded"))
        s.commit()
    _write(factory, [], job_id, finish=[other], owner="")  # a chunk no one holds, every item written
    with factory() as s:  # type: ignore[operator]
        assert s.get(Job, job_id).status == "finished"  # type: ignore[union-attr]


def test_a_chunk_the_write_leaves_items_open_in_is_handed_back_not_done(db_url: str) -> None:
    """The write finishes a chunk with an item still running (its answer lost) as ``finish_chunk`` does: handed
    back, no owner and not enqueued, for the reconciler to send again; its job goes on."""
    factory, job_id = queued_job(db_url, n=8, chunk=4)
    with factory() as s:  # type: ignore[operator]
        cid = job_store.chunks_of(s, job_id=job_id)[0]
        items = leases.claim_chunk(s, chunk_id=cid, owner="A", lease=timedelta(seconds=60))
        s.execute(update(Chunk).where(Chunk.id == cid).values(enqueued_at=utcnow(), sends=2))
        s.commit()
    moved, finished = _write(factory, items[:3], job_id, finish=[cid], owner="A")
    assert moved == {i.id for i in items[:3]} and finished == {cid}
    with factory() as s:  # type: ignore[operator]
        chunk = s.get(Chunk, cid)
        assert chunk is not None and not chunk.done and chunk.lease_owner is None
        assert chunk.enqueued_at is None and chunk.sends == 0
        assert s.get(Item, items[3].id).status == "running"  # type: ignore[union-attr]
        assert s.get(Job, job_id).status != "finished"  # type: ignore[union-attr]

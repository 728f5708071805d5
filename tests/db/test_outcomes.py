"""The outcome writer (``vlbatch.db.outcomes``): a redelivered item's outcome is written once, and a cancel wins over a
late result; on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import func, select, update

from tests.support.db import MARKER, outcome, queued_job, record
from vlbatch.db import job_store, leases, outcomes, tags
from vlbatch.db.models import Item, Job, Result


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

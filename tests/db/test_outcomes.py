"""The outcome writer (``vlbatch.db.outcomes``): a redelivered item's outcome is written once, and a cancel wins over a
late result; on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import func, select

from tests.support.db import outcome, queued_job, record
from vlbatch.db import job_store, leases
from vlbatch.db.models import Job, Result


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

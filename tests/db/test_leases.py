"""Leases, idempotent outcomes and the reconciler's view, on SQLite and PostgreSQL."""

from __future__ import annotations

import time
from datetime import timedelta

from sqlalchemy import func, select

from vlbatch.db import job_store, leases, outcomes, send_ledger
from vlbatch.db.models import Chunk, Job, Result, utcnow
from vlbatch.db.session import make_engine, make_sessionmaker, migrate


def _setup(db_url: str, n: int = 10, chunk: int = 4) -> tuple[object, str]:
    migrate(db_url)
    factory = make_sessionmaker(make_engine(db_url))
    with factory() as s:
        job = job_store.create_job(
            s,
            pipeline="image_tagging",
            model="m",
            options={"a": 1},
            items=[job_store.NewItem(inputs={"images": [f"{i}.jpg"]}) for i in range(n)],
            chunk_size=chunk,
        )
        s.commit()
        return factory, job.id


def _outcome(item_id: int, job_id: str, error: str | None = None) -> outcomes.Outcome:
    return outcomes.Outcome(
        item_id=item_id,
        job_id=job_id,
        output=None if error else {"tags": ["x"]},
        raw_text="{}",
        prompt_tokens=3,
        completion_tokens=2,
        error_code=error,
        error_message=error,
    )


def _record(s, o: outcomes.Outcome) -> bool:  # type: ignore[no-untyped-def]
    return outcomes.record_outcome(s, outcome=o, model="m", model_revision=None, pipeline_version="1", options_hash="h")


def test_chunking_and_bulk_insert(db_url: str) -> None:
    factory, job_id = _setup(db_url, n=10, chunk=4)
    with factory() as s:  # type: ignore[operator]
        chunks = job_store.chunks_of(s, job_id=job_id)
        assert len(chunks) == 3
        assert job_store.item_counts(s, job_id=job_id)["queued"] == 10


def test_lease_is_exclusive_until_expiry(db_url: str) -> None:
    factory, job_id = _setup(db_url)
    with factory() as s:  # type: ignore[operator]
        cid = job_store.chunks_of(s, job_id=job_id)[0]
        a = leases.claim_chunk(s, chunk_id=cid, owner="A", lease=timedelta(seconds=1))
        s.commit()
        assert len(a) == 4
        assert leases.claim_chunk(s, chunk_id=cid, owner="B", lease=timedelta(seconds=60)) == []
        s.commit()
        time.sleep(1.2)
        b = leases.claim_chunk(s, chunk_id=cid, owner="B", lease=timedelta(seconds=60))
        s.commit()
        assert [i.id for i in b] == [i.id for i in a]  # the expired lease hands the same items over


def test_redelivery_skips_done_items_and_results_stay_unique(db_url: str) -> None:
    factory, job_id = _setup(db_url, n=4, chunk=4)
    with factory() as s:  # type: ignore[operator]
        cid = job_store.chunks_of(s, job_id=job_id)[0]
        items = leases.claim_chunk(s, chunk_id=cid, owner="A", lease=timedelta(seconds=60))
        assert _record(s, _outcome(items[0].id, job_id))
        assert _record(s, _outcome(items[1].id, job_id, error="decode_error"))
        assert not _record(s, _outcome(items[0].id, job_id))  # duplicate write is a no-op
        s.commit()
        # worker A dies; B takes the chunk over and gets only the two unfinished items
        again = leases.claim_chunk(s, chunk_id=cid, owner="A", lease=timedelta(seconds=60))
        assert [i.id for i in again] == [items[2].id, items[3].id]
        for it in again:
            _record(s, _outcome(it.id, job_id))
        leases.finish_chunk(s, chunk_id=cid, owner="A")
        s.commit()
        counts = job_store.item_counts(s, job_id=job_id)
        assert counts["succeeded"] == 3 and counts["failed"] == 1
        assert s.scalar(select(func.count()).select_from(Result)) == 4
        assert s.get(Job, job_id).status == "finished"  # type: ignore[union-attr]
        assert leases.claim_chunk(s, chunk_id=cid, owner="B", lease=timedelta(seconds=60)) == []


def test_cancel_wins_over_late_result(db_url: str) -> None:
    factory, job_id = _setup(db_url, n=4, chunk=4)
    with factory() as s:  # type: ignore[operator]
        cid = job_store.chunks_of(s, job_id=job_id)[0]
        items = leases.claim_chunk(s, chunk_id=cid, owner="A", lease=timedelta(seconds=60))
        s.commit()
        assert job_store.cancel_job(s, job_id=job_id) == 4
        assert not _record(s, _outcome(items[0].id, job_id))
        s.commit()
        assert job_store.item_counts(s, job_id=job_id)["cancelled"] == 4
        assert s.scalar(select(func.count()).select_from(Result)) == 0


def test_reconciler_finds_lost_and_expired_chunks(db_url: str) -> None:
    factory, job_id = _setup(db_url, n=12, chunk=4)
    with factory() as s:  # type: ignore[operator]
        c0, c1, c2 = job_store.chunks_of(s, job_id=job_id)
        now = utcnow()
        assert {
            c.id for c in send_ledger.chunks_to_enqueue(s, now=now, stale_after=timedelta(minutes=5), limit=10)
        } == {
            c0,
            c1,
            c2,
        }
        send_ledger.mark_enqueued(s, chunk_ids=[c0, c1, c2])
        leases.claim_chunk(s, chunk_id=c1, owner="A", lease=timedelta(seconds=1))
        s.commit()
        assert send_ledger.chunks_to_enqueue(s, now=utcnow(), stale_after=timedelta(minutes=5), limit=10) == []
        later = utcnow() + timedelta(minutes=10)
        assert {
            c.id for c in send_ledger.chunks_to_enqueue(s, now=later, stale_after=timedelta(minutes=5), limit=10)
        } == {
            c0,
            c1,
            c2,
        }
        assert [
            c.id
            for c in send_ledger.chunks_to_enqueue(
                s, now=utcnow() + timedelta(seconds=2), stale_after=timedelta(minutes=5), limit=10
            )
        ] == [c1]


def test_lease_owners_are_unique_per_worker_context() -> None:
    from worker.context import default_owner

    # Two contexts in one process (or two task threads given separate feeders) never share a lease owner.
    assert default_owner() != default_owner()


def test_a_renewed_lease_is_not_taken_over_past_its_length(db_url: str) -> None:
    factory, job_id = _setup(db_url, n=4, chunk=4)
    lease = timedelta(seconds=1)
    with factory() as s:  # type: ignore[operator]
        cid = job_store.chunks_of(s, job_id=job_id)[0]
        assert leases.claim_chunk(s, chunk_id=cid, owner="A", lease=lease)
        s.commit()
        held_until = time.monotonic() + 3 * lease.total_seconds()  # held three leases long
        while time.monotonic() < held_until:
            assert leases.renew_leases(s, chunk_ids=[cid], owner="A", lease=lease) == {cid}
            s.commit()
            assert leases.claim_chunk(s, chunk_id=cid, owner="B", lease=lease) == []
            s.commit()
            time.sleep(0.3)
        time.sleep(lease.total_seconds() + 0.2)  # A stops renewing (it died): now B may take it over
        assert len(leases.claim_chunk(s, chunk_id=cid, owner="B", lease=timedelta(seconds=60))) == 4
        s.commit()
        assert leases.renew_leases(s, chunk_ids=[cid], owner="A", lease=lease) == set()  # A learns it lost it


def test_a_stale_owner_neither_finishes_nor_wipes_the_new_lease(db_url: str) -> None:
    factory, job_id = _setup(db_url, n=4, chunk=4)
    with factory() as s:  # type: ignore[operator]
        cid = job_store.chunks_of(s, job_id=job_id)[0]
        items = leases.claim_chunk(s, chunk_id=cid, owner="A", lease=timedelta(seconds=1))
        s.commit()
        time.sleep(1.2)
        assert leases.claim_chunk(s, chunk_id=cid, owner="B", lease=timedelta(seconds=60))
        s.commit()
        for it in items:  # A wrote every answer late (the upsert guard keeps one row each) ...
            _record(s, _outcome(it.id, job_id))
        assert leases.finish_chunk(s, chunk_id=cid, owner="A") is False  # ... but may not finish B's chunk
        assert leases.release_chunks(s, chunk_ids=[cid], owner="A") == 0
        s.commit()
        s.expire_all()
        chunk = s.get(Chunk, cid)
        assert chunk is not None and chunk.lease_owner == "B" and not chunk.done
        assert leases.finish_chunk(s, chunk_id=cid, owner="B") is True
        s.commit()
        assert s.get(Job, job_id).status == "finished"  # type: ignore[union-attr]


def test_an_unclaimed_chunk_is_resent_with_back_off(db_url: str) -> None:
    factory, job_id = _setup(db_url, n=4, chunk=4)
    stale = timedelta(seconds=60)
    with factory() as s:  # type: ignore[operator]
        cid = job_store.chunks_of(s, job_id=job_id)[0]
        waits = []
        for _ in range(8):
            send_ledger.mark_enqueued(s, chunk_ids=[cid])
            s.commit()
            s.expire_all()
            chunk = s.get(Chunk, cid)
            assert chunk is not None
            sent = utcnow()
            wait = send_ledger.resend_wait(stale, chunk.sends)
            # not due just before its wait is up, due just after
            assert not send_ledger.due_for_send(chunk, now=sent + wait - timedelta(seconds=2), stale_after=stale)
            assert send_ledger.due_for_send(chunk, now=sent + wait + timedelta(seconds=2), stale_after=stale)
            waits.append(wait.total_seconds())
        assert waits[:3] == [60, 120, 240] and waits[-1] == 60 * send_ledger.MAX_RESEND_BACKOFF
        leases.claim_chunk(s, chunk_id=cid, owner="A", lease=timedelta(seconds=60))  # a claim resets the back-off
        s.commit()
        s.expire_all()
        assert s.get(Chunk, cid).sends == 0  # type: ignore[union-attr]

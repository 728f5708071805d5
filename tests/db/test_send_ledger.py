"""The send ledger (``vlbatch.db.send_ledger``): lost and expired chunks are due again, and a chunk sent and never
claimed is sent again with back-off; on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

from tests.support.db import queued_job
from vlbatch.db import job_store, leases, send_ledger
from vlbatch.db.models import Chunk, utcnow


def test_reconciler_finds_lost_and_expired_chunks(db_url: str) -> None:
    factory, job_id = queued_job(db_url, n=12, chunk=4)
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


def test_an_unclaimed_chunk_is_resent_with_back_off(db_url: str) -> None:
    factory, job_id = queued_job(db_url, n=4, chunk=4)
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

"""Chunk leases (``vlbatch.db.leases``): exclusive until expiry, owned per worker context, renewed, never finished
or wiped by a stale owner; on SQLite and PostgreSQL."""

from __future__ import annotations

import time
from datetime import timedelta

from tests.support.db import outcome, queued_job, record
from vlbatch.db import job_store, leases
from vlbatch.db.models import Chunk, Job


def test_lease_is_exclusive_until_expiry(db_url: str) -> None:
    factory, job_id = queued_job(db_url)
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


def test_lease_owners_are_unique_per_worker_context() -> None:
    from worker.context import default_owner

    # Two contexts in one process (or two task threads given separate feeders) never share a lease owner.
    assert default_owner() != default_owner()


def test_a_renewed_lease_is_not_taken_over_past_its_length(db_url: str) -> None:
    factory, job_id = queued_job(db_url, n=4, chunk=4)
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
    factory, job_id = queued_job(db_url, n=4, chunk=4)
    with factory() as s:  # type: ignore[operator]
        cid = job_store.chunks_of(s, job_id=job_id)[0]
        items = leases.claim_chunk(s, chunk_id=cid, owner="A", lease=timedelta(seconds=1))
        s.commit()
        time.sleep(1.2)
        assert leases.claim_chunk(s, chunk_id=cid, owner="B", lease=timedelta(seconds=60))
        s.commit()
        for it in items:  # A wrote every answer late (the upsert guard keeps one row each) ...
            record(s, outcome(it.id, job_id))
        assert leases.finish_chunk(s, chunk_id=cid, owner="A") is False  # ... but may not finish B's chunk
        assert leases.release_chunks(s, chunk_ids=[cid], owner="A") == 0
        s.commit()
        s.expire_all()
        chunk = s.get(Chunk, cid)
        assert chunk is not None and chunk.lease_owner == "B" and not chunk.done
        assert leases.finish_chunk(s, chunk_id=cid, owner="B") is True
        s.commit()
        assert s.get(Job, job_id).status == "finished"  # type: ignore[union-attr]


def test_a_chunk_of_another_model_is_not_claimed_and_stays_for_its_own_workers(db_url: str) -> None:
    """A chunk id that reached a worker of another model (a shared queue, a hand-sent message) is not run by the
    wrong model: the claim leaves it unowned, and a worker of the job's model claims it."""
    factory, job_id = queued_job(db_url)  # the job asks for model "m"
    with factory() as s:  # type: ignore[operator]
        cid = job_store.chunks_of(s, job_id=job_id)[0]
        assert leases.claim_chunk(s, chunk_id=cid, owner="A", lease=timedelta(seconds=60), model="org/m") == []
        s.commit()
        chunk = s.get(Chunk, cid)
        assert chunk is not None and chunk.lease_owner is None
        assert len(leases.claim_chunk(s, chunk_id=cid, owner="B", lease=timedelta(seconds=60), model="m")) == 4

"""Claims in queue order (vlbatch/db/claim_order.py): messages come in send order, yet claims go earliest deadline
first, a small job submitted behind a huge one starts at the next claim, tenants share a queue by their weights,
and a chunk is never leased twice. The clock is a parameter: each claim is one simulated chunk's run, no sleeps.
On SQLite and PostgreSQL."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta

from sqlalchemy.orm import Session, sessionmaker

from vlbatch.db import claim_order, job_store, leases, queues
from vlbatch.db.models import Chunk, Job, utcnow
from vlbatch.db.session import make_engine, make_sessionmaker, migrate

LEASE = timedelta(seconds=120)
SHARES = claim_order.Shares(weights={}, window=timedelta(minutes=10))


def _sessions(db_url: str) -> sessionmaker[Session]:
    migrate(db_url)
    return make_sessionmaker(make_engine(db_url))


def _job(
    s: Session, *, n: int, chunk: int = 1, tenant: str = "default", deadline: datetime | None = None
) -> tuple[str, list[int]]:
    job = job_store.create_job(
        s,
        pipeline="image_tagging",
        model="m",
        options={},
        items=[job_store.NewItem(inputs={"images": [f"{i}.jpg"]}) for i in range(n)],
        chunk_size=chunk,
        tenant=tenant,
    )
    job.deadline = deadline
    s.commit()
    return job.id, job_store.chunks_of(s, job_id=job.id)


def _run(s: Session, *, messages: list[int], now: datetime, step: timedelta, shares: claim_order.Shares = SHARES):
    """One worker taking the messages in broker order, one chunk at a time: each claim runs for ``step`` of the
    simulated clock and its chunk is then finished. Returns (claimed job ids in order, claim times)."""
    order: list[str] = []
    times: list[datetime] = []
    for delivered in messages:
        leased, items = claim_order.claim_next(s, delivered=delivered, owner="w", lease=LEASE, shares=shares, now=now)
        if leased is None:
            continue
        chunk = s.get(Chunk, leased)
        assert chunk is not None and items
        order.append(chunk.job_id)
        times.append(now)
        for it in items:
            it.status = "succeeded"
        s.flush()
        assert leases.finish_chunk(s, chunk_id=leased, owner="w")
        s.commit()
        now += step
    return order, times


def test_jobs_submitted_in_reverse_deadline_order_are_claimed_and_finished_earliest_deadline_first(
    db_url: str,
) -> None:
    sessions = _sessions(db_url)
    t0 = utcnow()
    with sessions() as s:
        # Submitted (and so sent) in reverse: the 24 h job's messages are first in the broker.
        day, day_chunks = _job(s, n=6, deadline=t0 + timedelta(hours=24))
        two, two_chunks = _job(s, n=6, deadline=t0 + timedelta(hours=2))
        half, half_chunks = _job(s, n=6, deadline=t0 + timedelta(minutes=30))
        plain, plain_chunks = _job(s, n=3)  # no deadline: after every job that has one
        order, _ = _run(s, messages=day_chunks + two_chunks + half_chunks + plain_chunks, now=t0, step=LEASE / 4)
        assert order == [half] * 6 + [two] * 6 + [day] * 6 + [plain] * 3
        finished = {j: s.get(Job, j).finished_at for j in (half, two, day, plain)}  # type: ignore[union-attr]
    assert all(finished.values())
    assert finished[half] <= finished[two] <= finished[day] <= finished[plain]  # type: ignore[operator]


def test_a_small_job_after_a_huge_one_starts_at_the_next_claim_and_both_progress(db_url: str) -> None:
    sessions = _sessions(db_url)
    t0 = utcnow()
    step = timedelta(seconds=2)  # a chunk's run on the simulated clock: far under a lease
    with sessions() as s:
        # 100,000 items against 1,000, in chunks of 32 (the default): 3,125 messages in the broker first.
        huge, huge_chunks = _job(s, n=100_000, chunk=32)
        order, _ = _run(s, messages=huge_chunks[:5], now=t0, step=step)  # the huge job is under way
        assert order == [huge] * 5
        submitted = t0 + 5 * step
        small, small_chunks = _job(s, n=1_000, chunk=32)
        # The broker still holds thousands of the huge job's messages before the small job's 32.
        order, times = _run(s, messages=huge_chunks[5:80], now=submitted, step=step)
    started = times[order.index(small)]
    assert started - submitted < LEASE  # started at the next claim, not after 100,000 items
    assert started == submitted
    assert order.count(small) == len(small_chunks)  # every small chunk done within the huge job's backlog
    # The huge job keeps going too: the two take turns once their recent claims are even.
    assert order[: 2 * len(small_chunks)].count(huge) >= len(small_chunks) - 5


def test_two_tenants_share_a_queue_by_their_weights(db_url: str) -> None:
    sessions = _sessions(db_url)
    shares = claim_order.Shares(weights={"acme": 2.0}, window=timedelta(minutes=10))
    with sessions() as s:
        acme, acme_chunks = _job(s, n=60, tenant="acme")
        other, other_chunks = _job(s, n=60, tenant="other")
        order, _ = _run(
            s, messages=acme_chunks + other_chunks[:30], now=utcnow(), step=timedelta(seconds=1), shares=shares
        )
    counts = Counter(order[:30])
    assert counts == {acme: 20, other: 10}  # two claims for acme (weight 2) for each of other's (weight 1)


def test_a_chunk_held_is_not_claimed_again_and_a_paused_queue_claims_nothing(db_url: str) -> None:
    sessions = _sessions(db_url)
    now = utcnow()
    with sessions() as s:
        _job_id, chunks = _job(s, n=2)
        first, _ = claim_order.claim_next(s, delivered=chunks[0], owner="w", lease=LEASE, shares=SHARES, now=now)
        # The same worker, delivered the same message again (a duplicate): its own chunk again, not a second lease.
        again, _ = claim_order.claim_next(s, delivered=chunks[0], owner="w", lease=LEASE, shares=SHARES, now=now)
        # Another message of this worker's: the other chunk, never the held one.
        second, _ = claim_order.claim_next(s, delivered=chunks[0], owner="w2", lease=LEASE, shares=SHARES, now=now)
        third, items = claim_order.claim_next(s, delivered=chunks[1], owner="w3", lease=LEASE, shares=SHARES, now=now)
        assert (first, again, second, third, items) == (chunks[0], chunks[0], chunks[1], None, [])
        s.commit()
        _other, more = _job(s, n=2)
        assert queues.pause_queue(s, model="m", priority="batch", by="admin")
        s.commit()
        assert claim_order.claim_next(s, delivered=more[0], owner="w", lease=LEASE, shares=SHARES, now=now) == (
            None,
            [],
        )


def test_a_workers_rankings_are_reused_for_their_ttl_then_ranked_afresh(db_url: str) -> None:
    sessions = _sessions(db_url)
    t0 = utcnow()
    with sessions() as s:
        first, _ = _job(s, n=2)
        second, _ = _job(s, n=2)
        cached, fresh = claim_order.Rankings(ttl_s=3600), claim_order.Rankings(ttl_s=0)
        for rankings in (cached, fresh):
            assert rankings.ranked(s, model="m", priority="batch", now=t0, shares=SHARES) == [first, second]
        job = s.get(Job, second)
        assert job is not None
        job.deadline = t0 + timedelta(minutes=5)  # now due first
        s.commit()
        assert cached.ranked(s, model="m", priority="batch", now=t0, shares=SHARES) == [first, second]
        assert fresh.ranked(s, model="m", priority="batch", now=t0, shares=SHARES) == [second, first]


def test_an_early_or_past_deadline_orders_its_tenants_work_and_takes_no_other_tenants_share(db_url: str) -> None:
    sessions = _sessions(db_url)
    t0 = utcnow()
    with sessions() as s:
        # Tenant a names a deadline already over (as rows written before the API bounded them) and one due in a
        # minute; tenant b's long job has none. Each claim is b's message: the broker holds b's first.
        long_b, b_chunks = _job(s, n=40, tenant="b")
        _job(s, n=20, tenant="a", deadline=t0 + timedelta(minutes=1))
        past_a, _ = _job(s, n=20, tenant="a", deadline=t0 - timedelta(days=365))
        first, _ = _run(s, messages=b_chunks[:20], now=t0, step=timedelta(seconds=1))
    assert len(first) == 20
    assert Counter(first)[long_b] == 10  # shares even: 10 claims each
    # Within a's share its deadlines go earliest first: the past one before the one due in a minute.
    assert [j for j in first if j != long_b] == [past_a] * 10
    assert first[0] == past_a  # even shares at the start: the tenant due first


def test_many_one_chunk_jobs_count_their_finished_claims_in_their_tenants_share(db_url: str) -> None:
    sessions = _sessions(db_url)
    now = utcnow()
    claimed: Counter[str] = Counter()
    with sessions() as s:
        long_b, b_chunks = _job(s, n=40, tenant="b")
        for delivered in b_chunks[:20]:
            _job(s, n=1, tenant="a")  # a sends a new one-chunk job before every claim: each one is new
            order, _ = _run(s, messages=[delivered], now=now, step=timedelta(seconds=1))
            claimed.update("b" if j == long_b else "a" for j in order)
            now += timedelta(seconds=1)
    assert claimed == {"a": 10, "b": 10}

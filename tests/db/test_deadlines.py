"""A job's deadline verdict on a scaled clock (the clock is a parameter, items' finish times are set): on_track
while its queue's live rate covers what is ahead, at_risk when it no longer does, late once the deadline passes;
a job due earlier in the same queue counts as ahead. On SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from vlbatch.db import job_store
from vlbatch.db.deadlines import DeadlineStatus, deadline_view
from vlbatch.db.models import Item, Job, JobStatus, utcnow
from vlbatch.db.session import make_engine, make_sessionmaker, migrate

MARGIN = 0.9


def _job(s: Session, *, n: int, deadline: datetime) -> Job:
    job = job_store.create_job(
        s,
        pipeline="image_tagging",
        model="m",
        options={},
        items=[job_store.NewItem(inputs={"images": [f"{i}.jpg"]}) for i in range(n)],
        chunk_size=10,
    )
    job.deadline = deadline
    s.commit()
    return job


def _finish(s: Session, job: Job, *, n: int, at: datetime, started: datetime | None = None) -> None:
    """``n`` more of the job's items finish at ``at`` on the scaled clock (the job started at ``started``)."""
    ids = list(s.scalars(select(Item.id).where(Item.job_id == job.id, Item.status == "queued").order_by(Item.seq)))
    s.execute(update(Item).where(Item.id.in_(ids[:n])).values(status="succeeded", updated_at=at))
    if started is not None:
        job.started_at, job.status = started, JobStatus.RUNNING
    s.commit()


def _status(s: Session, job: Job, now: datetime) -> DeadlineStatus:
    view = deadline_view(s, job, now=now, margin=MARGIN)
    assert view is not None
    return view.status


def test_on_track_at_risk_and_late_follow_the_live_rate_and_the_clock(db_url: str) -> None:
    migrate(db_url)
    sessions = make_sessionmaker(make_engine(db_url))
    t0 = utcnow()
    minute = timedelta(minutes=1)
    with sessions() as s:
        job = _job(s, n=100, deadline=t0 + 60 * minute)
        assert _status(s, job, t0) == DeadlineStatus.ON_TRACK  # not started: no rate to judge by
        _finish(s, job, n=50, at=t0 + 10 * minute, started=t0)
        # 50 items in 10 minutes: the other 50 take 10 more, well within the 50 left.
        view = deadline_view(s, job, now=t0 + 10 * minute, margin=MARGIN)
        assert view is not None and view.status == DeadlineStatus.ON_TRACK
        assert view.items_ahead == 50 and view.expected_finish is not None
        assert abs((view.expected_finish - (t0 + 20 * minute)).total_seconds()) < 30
        # The rate drops to 10 items in the last 10 minutes: 40 left take 40 minutes, past the deadline.
        _finish(s, job, n=10, at=t0 + 25 * minute)
        assert _status(s, job, t0 + 30 * minute) == DeadlineStatus.AT_RISK
        # A burst brings it back.
        _finish(s, job, n=35, at=t0 + 39 * minute)
        assert _status(s, job, t0 + 40 * minute) == DeadlineStatus.ON_TRACK
        # Nothing more finishes: a started queue that finishes nothing meets no deadline.
        assert _status(s, job, t0 + 55 * minute) == DeadlineStatus.AT_RISK
        assert _status(s, job, t0 + 61 * minute) == DeadlineStatus.LATE  # deadline passed, items open
        _finish(s, job, n=5, at=t0 + 62 * minute)
        job.status, job.finished_at = JobStatus.FINISHED, t0 + 62 * minute
        s.commit()
        assert _status(s, job, t0 + 90 * minute) == DeadlineStatus.LATE  # finished after its deadline


def test_a_job_due_earlier_in_the_queue_is_ahead(db_url: str) -> None:
    migrate(db_url)
    sessions = make_sessionmaker(make_engine(db_url))
    t0 = utcnow()
    minute = timedelta(minutes=1)
    with sessions() as s:
        later = _job(s, n=20, deadline=t0 + 30 * minute)
        _finish(s, later, n=10, at=t0 + 5 * minute, started=t0)  # 10 items in 5 minutes (the queue's rate: 2 a minute)
        assert _status(s, later, t0 + 5 * minute) == DeadlineStatus.ON_TRACK  # 10 left: 5 minutes
        sooner = _job(s, n=40, deadline=t0 + 20 * minute)  # claimed first from now on
        view = deadline_view(s, later, now=t0 + 5 * minute, margin=MARGIN)
        assert view is not None and view.items_ahead == 50  # its own 10 behind the other's 40
        assert view.status == DeadlineStatus.AT_RISK  # 25 minutes of work, 25 minutes left: over the margin
        sooner_view = deadline_view(s, sooner, now=t0 + 5 * minute, margin=MARGIN)
        assert sooner_view is not None and sooner_view.items_ahead == 40


def test_another_tenants_job_is_not_ahead_but_takes_its_share_of_the_rate(db_url: str) -> None:
    migrate(db_url)
    sessions = make_sessionmaker(make_engine(db_url))
    t0 = utcnow()
    minute = timedelta(minutes=1)
    with sessions() as s:
        mine = _job(s, n=20, deadline=t0 + 30 * minute)
        _finish(s, mine, n=10, at=t0 + 5 * minute, started=t0)  # the queue's rate: 2 items a minute
        theirs = job_store.create_job(
            s,
            pipeline="image_tagging",
            model="m",
            options={},
            items=[job_store.NewItem(inputs={"images": [f"{i}.jpg"]}) for i in range(40)],
            chunk_size=10,
            tenant="other",
        )
        theirs.deadline = t0 + 20 * minute  # due earlier, but another tenant's: it runs in its own share
        s.commit()
        view = deadline_view(s, mine, now=t0 + 5 * minute, margin=MARGIN)
        assert view is not None and view.items_ahead == 10  # only its own
        assert view.items_per_second is not None and abs(view.items_per_second * 60 - 1.0) < 1e-6  # half of 2/min
        assert view.status == DeadlineStatus.ON_TRACK  # 10 minutes of work at 1 a minute, 25 left
        weighted = deadline_view(s, mine, now=t0 + 5 * minute, margin=MARGIN, weights={"other": 4.0})
        assert weighted is not None and weighted.status == DeadlineStatus.AT_RISK  # a fifth: 25 minutes of work

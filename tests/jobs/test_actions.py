"""The jobs service's actions (``jobs.actions``): a re-run is a new job under the same quota protocol as any other,
and a state change the job's state does not allow is refused with its code, on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from jobs import actions, publisher
from jobs.refusals import JobRefused
from jobs.request import JobRequest
from jobs.submit import submit
from vlbatch.db import job_store
from vlbatch.db.models import Chunk, Item, ItemStatus, Job, JobStatus
from vlbatch.db.session import make_engine, make_sessionmaker, migrate
from vlbatch.errors import ACTIVE_JOBS_QUOTA_EXCEEDED, ITEMS_QUOTA_EXCEEDED, JOB_STATE_CONFLICT, TOO_MANY_ITEMS
from vlbatch.settings import Settings


@pytest.fixture
def sessions(db_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[sessionmaker[Session]]:
    monkeypatch.setattr(publisher, "publish_chunks", lambda *a, **kw: True)
    migrate(db_url)
    engine = make_engine(db_url)
    yield make_sessionmaker(engine)
    engine.dispose()


def _job(s: Session, settings: Settings, tenant: str = "acme") -> Job:
    items = [job_store.NewItem(inputs={"images": [f"/x/{i}.jpg"]}) for i in range(3)]
    return submit(s, settings, JobRequest(pipeline="image_tagging", model="m", options={}, items=items, tenant=tenant))


def test_a_rerun_is_admitted_as_a_new_job_and_a_refused_one_leaves_nothing(
    db_url: str, sessions: sessionmaker[Session]
) -> None:
    settings = Settings(database_url=db_url, tenant_max_active_jobs=1)
    with sessions() as s:
        old = _job(s, settings)
        with pytest.raises(JobRefused) as refused:  # the old job is still unfinished: no room for a second
            actions.rerun(s, settings, old, scope="all")
        assert refused.value.code == ACTIVE_JOBS_QUOTA_EXCEEDED
        s.rollback()
        assert s.scalar(select(func.count()).select_from(Job)) == 1
        actions.cancel(s, old)
        with pytest.raises(JobRefused) as ended:
            actions.cancel(s, old)
        assert ended.value.code == JOB_STATE_CONFLICT
        new = actions.rerun(s, settings, old, scope="all")  # cancelled items did not succeed: all of them again
        assert (new.tenant, new.total) == ("acme", 3)
        assert set(s.scalars(select(Chunk.sends).where(Chunk.job_id == new.id))) == {1}  # started: sent once
        # everything again asks the engine again, under the same processed-with marker
        assert new.options.get("reuse") is False and new.options_hash == old.options_hash


def test_pause_and_resume_refuse_the_wrong_state_and_resume_sends_again(
    db_url: str, sessions: sessionmaker[Session]
) -> None:
    settings = Settings(database_url=db_url)
    with sessions() as s:
        job = _job(s, settings)
        with pytest.raises(JobRefused) as not_paused:
            actions.resume(s, settings, job)
        assert not_paused.value.code == JOB_STATE_CONFLICT
        s.rollback()
        assert actions.pause(s, job).status == JobStatus.PAUSED
        with pytest.raises(JobRefused):
            actions.pause(s, job)
        s.rollback()
        assert actions.resume(s, settings, job).status == JobStatus.QUEUED
        assert set(s.scalars(select(Chunk.sends).where(Chunk.job_id == job.id))) == {2}


def test_a_rerun_is_sized_by_the_items_it_takes_not_by_the_old_job(
    db_url: str, sessions: sessionmaker[Session]
) -> None:
    with sessions() as s:
        old = _job(s, Settings(database_url=db_url))  # 3 items, made before the quota was lowered
        done = list(s.scalars(select(Item).where(Item.job_id == old.id).order_by(Item.seq)))[:2]
        for item in done:
            item.status = ItemStatus.SUCCEEDED
        actions.cancel(s, old)
        settings = Settings(database_url=db_url, tenant_max_items_per_job=2)
        with pytest.raises(JobRefused) as too_big:  # every item again: 3 items, over the tenant's 2
            actions.rerun(s, settings, old, scope="all")
        assert too_big.value.code == ITEMS_QUOTA_EXCEEDED
        s.rollback()
        new = actions.rerun(s, settings, old, scope="missing")  # the one item that did not succeed fits
        assert new.total == 1
        with pytest.raises(JobRefused) as over_limit:  # the service-wide limit is checked as for any new job
            actions.rerun(s, settings.model_copy(update={"max_items_per_job": 2}), old, scope="all")
        assert over_limit.value.code == TOO_MANY_ITEMS

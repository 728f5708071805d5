"""The jobs service's submit (``jobs.submit``): one place makes job rows, one place publishes chunks, one chunk-size
rule; the quota protocol (insert, then admit) and the Idempotency-Key, on SQLite and PostgreSQL."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from jobs import publisher
from jobs.new_items import chunk_size
from jobs.refusals import JobRefused
from jobs.request import JobRequest
from jobs.submit import submit
from vlbatch.db import job_store
from vlbatch.db.models import Chunk, Job
from vlbatch.db.session import make_engine, make_sessionmaker, migrate
from vlbatch.errors import ACTIVE_JOBS_QUOTA_EXCEEDED, IDEMPOTENCY_KEY_REUSED, ITEMS_QUOTA_EXCEEDED, TOO_MANY_ITEMS
from vlbatch.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
# Where rows and messages are made: the db layer's own functions, the migrations, and the jobs service.
DB_LAYER = ("vlbatch/db/", "vlbatch/migrations/")
SERVICE = "jobs/"


def _product_calls() -> Iterator[tuple[str, int, str]]:
    """(file, line, called name) of every call in the product packages (each top-level folder with an
    ``__init__.py`` but the tests)."""
    for package in sorted(p.parent for p in ROOT.glob("*/__init__.py") if p.parent.name != "tests"):
        for path in sorted(package.rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=rel)):
                if isinstance(node, ast.Call):
                    func_ = node.func
                    name = func_.id if isinstance(func_, ast.Name) else getattr(func_, "attr", "")
                    yield rel, node.lineno, name


def test_one_place_creates_job_rows_and_one_place_publishes_chunks() -> None:
    calls = list(_product_calls())
    assert any(rel == "jobs/submit.py" and name == "create_job" for rel, _, name in calls)  # the walk sees calls
    job_rows = [f"{rel}:{line}" for rel, line, name in calls if name == "Job" and not rel.startswith(DB_LAYER)]
    assert job_rows == [], "a Job row is made outside the db layer; make it through jobs.submit"
    creators = {"create_job", "new_job", "add_items"}
    made = [
        f"{rel}:{line} {name}"
        for rel, line, name in calls
        if name in creators and not rel.startswith((*DB_LAYER, SERVICE))
    ]
    assert made == [], "a job is inserted outside the jobs service; call jobs.submit"
    senders = {"publish_chunks", "send_chunks", "send_task"}
    sent = [f"{rel}:{line} {name}" for rel, line, name in calls if name in senders and not rel.startswith(SERVICE)]
    assert sent == [], "chunks are published outside the jobs service; go through jobs.publisher"


def test_one_chunk_size_rule_for_every_kind() -> None:
    settings = Settings(chunk_size=7, document_chunk_size=3)
    assert chunk_size(settings, "image_tagging") == 7
    assert chunk_size(settings, "summarize") == 3  # documents run a few at a time
    assert chunk_size(settings, "chat") == 7  # request lines of a batch
    assert chunk_size(settings, "gone_plugin") == 7  # no longer registered: counted as an image pipeline


@pytest.fixture
def sessions(db_url: str) -> Iterator[sessionmaker[Session]]:
    migrate(db_url)
    engine = make_engine(db_url)
    yield make_sessionmaker(engine)
    engine.dispose()


def _request(n: int = 5, **kw: object) -> JobRequest:
    items = [job_store.NewItem(inputs={"images": [f"/x/{i}.jpg"]}) for i in range(n)]
    return JobRequest(pipeline="image_tagging", model="m", options={}, items=items, **kw)  # type: ignore[arg-type]


def _jobs(sessions: sessionmaker[Session]) -> int:
    with sessions() as s:
        return int(s.scalar(select(func.count()).select_from(Job)) or 0)


def test_submit_marks_the_chunks_sent_before_the_publish_and_embedded_runs_leave_them_unsent(
    db_url: str, sessions: sessionmaker[Session], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[set[object]] = []

    def publish(settings: Settings, *, model: str, priority: str, chunk_ids: list[int]) -> bool:
        with sessions() as s:  # what another process (a reconciler pass) reads meanwhile
            seen.append(set(s.scalars(select(Chunk.enqueued_at).where(Chunk.id.in_(chunk_ids)))))
        return True

    monkeypatch.setattr(publisher, "publish_chunks", publish)
    settings = Settings(database_url=db_url, chunk_size=2)
    with sessions() as s:
        job = submit(s, settings, _request(5))
    assert len(seen) == 1 and None not in seen[0]  # committed as sent before the message went out
    with sessions() as s:
        assert s.scalar(select(func.count()).select_from(Chunk).where(Chunk.job_id == job.id)) == 3
        local = submit(s, settings, _request(5), publish=False, admit=False)
        assert set(s.scalars(select(Chunk.enqueued_at).where(Chunk.job_id == local.id))) == {None}
    assert len(seen) == 1


def test_the_quota_protocol_counts_the_new_job_and_rolls_a_refusal_back(
    db_url: str, sessions: sessionmaker[Session], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(publisher, "publish_chunks", lambda *a, **kw: True)
    settings = Settings(database_url=db_url, tenant_max_active_jobs=2, tenant_max_items_per_job=10)
    with sessions() as s:
        submit(s, settings, _request(tenant="acme"))
        submit(s, settings, _request(tenant="acme"))
        with pytest.raises(JobRefused) as refused:
            submit(s, settings, _request(tenant="acme"))
        assert refused.value.code == ACTIVE_JOBS_QUOTA_EXCEEDED
        assert refused.value.message.startswith("tenant 'acme' has 2 unfinished jobs, its quota is 2")
        s.rollback()
        submit(s, settings, _request(tenant="globex"))  # another tenant's room is its own
        with pytest.raises(JobRefused) as big:
            submit(s, settings, _request(11, tenant="globex"))
        assert big.value.code == ITEMS_QUOTA_EXCEEDED
        s.rollback()
        with pytest.raises(JobRefused) as huge:
            submit(s, settings.model_copy(update={"max_items_per_job": 4}), _request(5, tenant="initech"))
        assert huge.value.code == TOO_MANY_ITEMS
        s.rollback()
        submit(s, settings, _request(tenant="acme"), publish=False, admit=False)  # the embedded runner's own
    assert _jobs(sessions) == 4


def test_an_idempotency_key_makes_one_job_and_refuses_another_request(
    db_url: str, sessions: sessionmaker[Session], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(publisher, "publish_chunks", lambda *a, **kw: True)
    settings = Settings(database_url=db_url)
    with sessions() as s:
        first = submit(s, settings, _request(idempotency_key="k1", request_hash="h1"))
        again = submit(s, settings, _request(idempotency_key="k1", request_hash="h1"))  # the insert is the check
        assert again.id == first.id
        with pytest.raises(JobRefused) as other:
            submit(s, settings, _request(idempotency_key="k1", request_hash="h2"))
        assert other.value.code == IDEMPOTENCY_KEY_REUSED
        s.rollback()
        assert submit(s, settings, _request(idempotency_key="k1", request_hash="h1", tenant="t2")).id != first.id
    assert _jobs(sessions) == 2

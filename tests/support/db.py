"""A queued job of N items in a fresh database, and items' outcomes written as the worker writes them: the set-up
the db protocols' tests share."""

from __future__ import annotations

from sqlalchemy.orm import Session, sessionmaker

from vlbatch.db import job_store, outcomes
from vlbatch.db.session import make_engine, make_sessionmaker, migrate


def queued_job(db_url: str, n: int = 10, chunk: int = 4, *, model: str = "m") -> tuple[sessionmaker[Session], str]:
    """A migrated database at ``db_url`` holding one queued image job of ``n`` items in chunks of ``chunk``, asking
    for ``model``."""
    migrate(db_url)
    factory = make_sessionmaker(make_engine(db_url))
    with factory() as s:
        job = job_store.create_job(
            s,
            pipeline="image_tagging",
            model=model,
            options={"a": 1},
            items=[job_store.NewItem(inputs={"images": [f"{i}.jpg"]}) for i in range(n)],
            chunk_size=chunk,
        )
        s.commit()
        return factory, job.id


def outcome(item_id: int, job_id: str, error: str | None = None) -> outcomes.Outcome:
    """A success with one tag, or a failure with ``error`` as its code and message."""
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


MARKER = outcomes.Marker(model="m", model_revision=None, pipeline_version="1", options_hash="h")


def record(s: Session, o: outcomes.Outcome) -> bool:
    """Write one outcome through the worker's writer under a fixed marker; False when the item was already terminal."""
    return outcomes.record_outcomes(s, outcomes=[o], markers={o.job_id: MARKER}) == [o.item_id]

"""Jobs whose items already ran, written straight through the CRUD layer: for tests of what reads results
(exports, sidecars, the dashboard) without an engine."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from vlbatch.db import job_store, leases, outcomes
from vlbatch.db.session import make_engine, make_sessionmaker, migrate

MARKER = outcomes.Marker(model="m", model_revision=None, pipeline_version="1", options_hash="h")


def finished_job(
    db_url: str, items: list[tuple[dict[str, Any], dict[str, Any] | None]], *, model: str = "m"
) -> tuple[sessionmaker[Session], str]:
    """A job whose items ran: each (inputs, output) succeeds with output, or fails (decode_error) when output
    is None. Returns the session factory and the job id."""
    migrate(db_url)
    factory = make_sessionmaker(make_engine(db_url))
    with factory() as s:
        job = job_store.create_job(
            s,
            pipeline="image_tagging",
            model=model,
            options={},
            items=[job_store.NewItem(inputs=inputs, ref=f"r{i}") for i, (inputs, _) in enumerate(items)],
            chunk_size=100,
        )
        s.commit()
        (chunk_id,) = job_store.chunks_of(s, job_id=job.id)
        claimed = leases.claim_chunk(s, chunk_id=chunk_id, owner="test", lease=timedelta(minutes=5))
        s.commit()
        done = [
            outcomes.Outcome(
                item_id=item.id,
                job_id=job.id,
                output=output,
                raw_text=None,
                prompt_tokens=1,
                completion_tokens=1,
                error_code=None if output is not None else "decode_error",
                error_message=None if output is not None else "JPEG decode failed: premature end of data",
            )
            for item, (_, output) in zip(sorted(claimed, key=lambda i: i.seq), items, strict=True)
        ]
        outcomes.record_outcomes(s, outcomes=done, markers={job.id: MARKER})
        leases.finish_chunk(s, chunk_id=chunk_id, owner="test")
        s.commit()
        return factory, job.id

"""A job as the API shows it (``job_out``: counts, rate, ETA, energy, deadline
verdict, warnings: a model no live worker serves, every item failed) and the one tenant-scoped lookup of a job by id
(``found_job``), for the job routes and the dashboard alike."""

from __future__ import annotations

from sqlalchemy.orm import Session

from api.deps import Principal
from api.http_errors import JobNotFound
from api.schemas import JobEnergyOut, JobOut
from jobs.submit import unserved_model
from vlbatch.db import engine_states, job_store, retention
from vlbatch.db.deadlines import deadline_view
from vlbatch.db.energy import job_energy
from vlbatch.db.models import Job, JobStatus, PausedQueue, utcnow
from vlbatch.settings import Settings

_MOVING = frozenset({JobStatus.QUEUED, JobStatus.RUNNING})  # jobs a broken engine can stall


def job_out(session: Session, settings: Settings, job: Job, *, price_per_kwh: float | None = None) -> JobOut:
    counts = job_store.item_counts(session, job_id=job.id)
    done = counts["succeeded"] + counts["failed"]
    energy = job_energy(job, items_done=done, price_per_kwh=price_per_kwh)
    rate = eta = None
    if job.started_at is not None and done:
        end = job.finished_at or utcnow()
        elapsed = max((end - job.started_at.replace(tzinfo=end.tzinfo)).total_seconds(), 1e-6)
        rate = done / elapsed
        eta = (counts["queued"] + counts["running"]) / rate
    verdict = deadline_view(session, job, now=utcnow())
    return JobOut(
        id=job.id,
        pipeline=job.pipeline,
        model=job.model,
        priority=job.priority,
        status=job.status,
        total=job.total,
        counts=counts,
        created_at=job.created_at,
        started_at=job.started_at,
        finished_at=job.finished_at,
        items_per_second=rate,
        eta_seconds=eta,
        queue_paused=session.get(PausedQueue, (job.model, job.priority)) is not None,
        stalled=engine_states.stalled_reason(session, model=job.model) if job.status in _MOVING else None,
        energy=JobEnergyOut(
            wh=energy.wh,
            wh_per_1000_items=energy.wh_per_1000_items,
            cost=energy.cost,
            unmetered_tokens=energy.unmetered_tokens,
        ),
        deadline=job.deadline,
        deadline_status=verdict.status.value if verdict is not None else None,
        expected_finish_at=verdict.expected_finish if verdict is not None else None,
        expires_at=retention.job_expires_at(job, retention.policy(session, settings)),
        warnings=job_warnings(session, settings, job, counts),
        options=job_store.shaping_options(job.options),
        options_hash=job.options_hash,
    )


def job_warnings(session: Session, settings: Settings, job: Job, counts: dict[str, int]) -> list[str]:
    """What the job's status alone does not say: that it waits for a model no live worker serves (else it sits
    ``queued`` with no reason), or that it ended ``finished`` with every item failed."""
    warnings = []
    if job.status in _MOVING and (text := unserved_model(session, settings, job.model, job_id=job.id)):
        warnings.append(text)
    failed = counts["failed"]
    if job.status == JobStatus.FINISHED and failed and failed == job.total:
        warnings.append(
            f"every item failed ({failed} of {job.total}): GET /v1/jobs/{job.id}/items?status=failed has their errors"
        )
    return warnings


def found_job(session: Session, job_id: str, principal: Principal) -> Job:
    """The job if the principal may see it; another tenant's job is not found (404), so ids confirm nothing."""
    job = job_store.get_job(session, job_id=job_id, tenant=principal.scope)
    if job is None:
        raise JobNotFound(job_id)
    return job

"""What is done to a job after it is made: re-run it, retry its failed items, cancel, pause and resume it, edit an
item's tags by hand, and pause or resume a whole queue. One function per action, called by the API's routes and the
dashboard alike.

Each takes a job the caller may act on (the API has checked the tenant), refuses with ``JobRefused`` when the job's
state does not allow the action, and commits. What has to run again goes through the one publisher
(``jobs.publisher.send_chunks``: marked sent, committed, then published); a re-run is a new job and is made as any new
job is (``jobs.submit.insert`` then ``start``).
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.orm import Session

from jobs.publisher import queue_name, send_chunks
from jobs.quotas import admit_inserted_job
from jobs.refusals import JobRefused
from jobs.request import JobRequest
from jobs.submit import insert, start
from pipelines import registry
from pipelines.base import PipelineKind
from vlbatch.db import job_store, queues
from vlbatch.db.models import Item, Job, JobStatus
from vlbatch.db.results import ResultRecord, result_of
from vlbatch.db.tags import edit_tags as write_tag_edits
from vlbatch.errors import (
    BATCH_OWNED_JOB,
    ITEM_NOT_FOUND,
    JOB_STATE_CONFLICT,
    NO_RESULT_TO_TAG,
    NOTHING_TO_RERUN,
    QUEUE_STATE_CONFLICT,
)
from vlbatch.settings import Settings


def check_not_batch_owned(job: Job) -> None:
    """Refuse to act on a job whose items are an OpenAI batch's lines: the batch owns its state (cancelling the
    job alone would end the batch ``completed`` without ``cancelled_at``; a re-run would be a job outside any
    batch; a paused job leaves its batch ``in_progress``). Its own routes are ``/v1/batches/{id}``."""
    if job.pipeline in registry.names() and registry.get(job.pipeline).kind == PipelineKind.REQUEST:
        raise JobRefused(
            BATCH_OWNED_JOB, f"job '{job.id}' runs an OpenAI batch's lines: act on it through /v1/batches/{{id}}"
        )


def rerun(session: Session, settings: Settings, job: Job, *, scope: str, model_revision: str | None = None) -> Job:
    """A new job over ``job``'s inputs (``job_store.rerun_selection``: all of them, those that did not succeed, or
    those whose processed-with marker differs from now), of the old job's tenant, admitted as any new job is
    (``jobs.submit.insert``: its size, the tenant's quotas) and started. Scope ``all`` asks the engine again for every
    item (``reuse: false`` where the pipeline takes it)."""
    check_not_batch_owned(job)
    pipeline = registry.get(job.pipeline) if job.pipeline in registry.names() else None
    options = job.options
    if scope == "all" and pipeline is not None and "reuse" in pipeline.Options.model_fields:
        options = {**job.options, "reuse": False}  # everything again means the engine again, not stored answers
    selected = job_store.rerun_selection(
        session,
        job=job,
        scope=scope,
        pipeline_version=pipeline.version if pipeline is not None else None,
        model_revision=model_revision,
    )
    if not selected:
        raise JobRefused(NOTHING_TO_RERUN, f"job '{job.id}' has no items to re-run with scope '{scope}'")
    request = JobRequest(
        pipeline=job.pipeline,
        options=options,
        items=[item for _, item in selected],
        model=job.model,
        priority=job.priority,
        tenant=job.tenant,
        output_dir=job.output_dir,
    )
    new = insert(session, settings, request)  # refused: the new job is rolled back with the session
    job_store.carry_rerun_edits(session, old_job_id=job.id, new_job_id=new.id, old_item_ids=[i for i, _ in selected])
    start(session, settings, new)
    return new


def retry_failed(session: Session, settings: Settings, job: Job) -> list[int]:
    """Queue the job's failed items again, in place (``job_store.retry_failed``), and send their chunks; returns the
    chunk ids ([] when no item failed).

    Refused for a cancelled job (its items stay as they ended), a paused one (``resume`` sends its chunks) and a
    batch's job (``check_not_batch_owned``). A finished job runs again, so it counts against its tenant's
    unfinished-jobs quota as a new job would."""
    check_not_batch_owned(job)
    if job.status in (JobStatus.CANCELLED, JobStatus.PAUSED):
        raise JobRefused(JOB_STATE_CONFLICT, f"job '{job.id}' is {job.status}: its failed items cannot be retried")
    chunk_ids = job_store.retry_failed(session, job_id=job.id)
    if chunk_ids:
        admit_inserted_job(session, settings, job.tenant)  # the job is unfinished again; refused: rolled back
    send_chunks(session, settings, model=job.model, priority=job.priority, chunk_ids=chunk_ids)
    return chunk_ids


def cancel(session: Session, job: Job) -> Job:
    """Cancel a queued, running or paused job; a finished or cancelled one is refused and left as it is."""
    check_not_batch_owned(job)
    if job_store.cancel_job(session, job_id=job.id) is None:
        raise JobRefused(JOB_STATE_CONFLICT, f"job '{job.id}' is {job.status}: an ended job cannot be cancelled")
    session.commit()
    session.refresh(job)
    return job


def pause(session: Session, job: Job) -> Job:
    """Stop claims of the job's chunks; items workers already hold finish."""
    check_not_batch_owned(job)
    if not job_store.pause_job(session, job_id=job.id):
        raise JobRefused(JOB_STATE_CONFLICT, f"job '{job.id}' is {job.status}: only a queued or running job pauses")
    session.commit()
    session.refresh(job)
    return job


def resume(session: Session, settings: Settings, job: Job) -> Job:
    """Resume a paused job: its unfinished chunks are sent again (their messages were dropped while it paused)."""
    check_not_batch_owned(job)
    chunk_ids = job_store.resume_job(session, job_id=job.id)
    if chunk_ids is None:
        raise JobRefused(JOB_STATE_CONFLICT, f"job '{job.id}' is {job.status}, not paused")
    send_chunks(session, settings, model=job.model, priority=job.priority, chunk_ids=chunk_ids)
    session.refresh(job)
    return job


def edit_tags(
    session: Session,
    settings: Settings,
    job: Job,
    *,
    item_id: int,
    add: Sequence[str],
    remove: Sequence[str],
    author: str,
) -> ResultRecord:
    """Add and remove tags by hand on the result of ``job``'s item ``item_id``, as ``author``; returns the item's
    record with its tags merged again. Refused (nothing written) when the job has no such item, when the item has
    no result yet, or past ``settings.max_manual_tags`` edited tags (``vlbatch.db.tags.TooManyManualTags``)."""
    item = session.get(Item, item_id)
    if item is None or item.job_id != job.id:
        raise JobRefused(ITEM_NOT_FOUND, f"job '{job.id}' has no item {item_id}")
    edited = write_tag_edits(
        session, item_id=item_id, add=add, remove=remove, author=author, max_edits=settings.dashboard.max_manual_tags
    )
    if edited is None:
        raise JobRefused(NO_RESULT_TO_TAG, f"item {item_id} is {item.status} and has no result to tag yet")
    session.commit()
    record = result_of(session, item_id=item_id)
    if record is None:  # deleted meanwhile: the job was removed under the edit
        raise JobRefused(ITEM_NOT_FOUND, f"job '{job.id}' has no item {item_id}")
    return record


def pause_queue(session: Session, *, model: str, priority: str, by: str) -> None:
    """Stop claims of the chunks of every job on the queue; chunks workers hold finish."""
    if not queues.pause_queue(session, model=model, priority=priority, by=by):
        raise JobRefused(QUEUE_STATE_CONFLICT, f"queue {queue_name(model, priority)} is paused already")
    session.commit()


def resume_queue(session: Session, settings: Settings, *, model: str, priority: str) -> None:
    """Resume a paused queue: the unfinished chunks of its queued and running jobs are sent again."""
    chunk_ids = queues.resume_queue(session, model=model, priority=priority)
    if chunk_ids is None:
        raise JobRefused(QUEUE_STATE_CONFLICT, f"queue {queue_name(model, priority)} is not paused")
    send_chunks(session, settings, model=model, priority=priority, chunk_ids=chunk_ids)

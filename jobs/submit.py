"""Submit: a new job is made and started one way, whoever asks (an API route, a batch, a nightly run, the embedded
runner, the bench).

``submit`` = ``insert`` + ``start``; ``dry_run`` answers what a submit would run (``jobs.estimate``) and stores nothing.

1. ``insert`` checks the job's size (``VLBATCH_MAX_ITEMS_PER_JOB``, then the tenant's items quota), names the model,
   inserts the job, its chunks (``chunk_size``: the one rule) and its items, and admits it against the tenant's
   active-jobs quota (``jobs.quotas``: insert then admit). Nothing is committed: a refusal rolls it all back.
2. ``start`` marks the chunks sent, commits, then publishes them (``jobs.publisher.send_chunks``), in that order:
   a reconciler pass during a long publish sees them as sent, not lost. With ``publish=False`` (the embedded
   runner, which feeds the chunks itself; a broker-less run) it only commits.

A caller with rows of its own to write in the job's transaction (a nightly run records the inbox files, a batch
its state) calls ``insert``, writes them, then ``start``. An Idempotency-Key is unique per tenant: the insert is the
check, so concurrent retries make one job and the others are answered with it (``replayed``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from jobs.estimate import Estimate, Geometry, Planner, TextCounter, deadline_check, estimate
from jobs.item_streams import ItemStream, bounded
from jobs.new_items import chunk_size
from jobs.publisher import send_chunks
from jobs.quotas import admit_inserted_job, check_job_size
from jobs.refusals import JobRefused
from jobs.request import JobRequest
from vlbatch.db import batches, job_store, queues
from vlbatch.db.models import Job, utcnow
from vlbatch.errors import IDEMPOTENCY_KEY_REUSED, MODEL_NOT_SERVED, NO_MODEL, TOO_MANY_ITEMS
from vlbatch.settings import Settings


def model_not_served(session: Session, settings: Settings, model: str) -> str | None:
    """A warning when workers are live but none serves ``model`` (``unserved_model``): its job would wait silently.
    ``VLBATCH_MODEL_NOT_SERVED=refuse`` refuses it instead (``JobRefused(model_not_served)``)."""
    text = unserved_model(session, settings, model)
    if text is not None and settings.model.model_not_served == "refuse":
        raise JobRefused(MODEL_NOT_SERVED, text)
    return text


def unserved_model(session: Session, settings: Settings, model: str, *, job_id: str | None = None) -> str | None:
    """Why a job for ``model`` waits, when workers are live (an engine sample in the last three sample intervals, a
    minute at least) but none serves it; None when a worker serves it, or no worker is live at all (workers may be
    starting). The models live workers do serve are named (a tenant cannot read the queues), and the job's own
    route, which keeps saying so while the job waits."""
    window = timedelta(seconds=max(60.0, 3 * settings.worker.engine_sample_interval_s))
    served = queues.served_models(session, since=utcnow() - window)
    if not model or not served or model in served:
        return None
    route = f"GET /v1/jobs/{job_id or 'JOB_ID'}"
    return (
        f"no live worker serves model '{model}' (live workers serve: {', '.join(served)}): the job waits until one"
        f" does; {route} says so while it waits"
    )


@dataclass(frozen=True)
class Submitted:
    """A job made for a client, and what its answer warns of: a deadline the estimate misses (a ``strict_deadline``
    refuses instead). Warnings of the job's state (a model no live worker serves, every item failed) are the job's
    own and come with every read of it."""

    job: Job
    warnings: list[str]


def create(session: Session, settings: Settings, request: JobRequest) -> Submitted:
    """A client's new job (an API route's): ``submit``, refused first when no live worker serves its model and
    ``VLBATCH_MODEL_NOT_SERVED=refuse``, with the deadline's warnings (a stream's: checked once it is read)."""
    stream = request.items if isinstance(request.items, ItemStream) else None
    warnings = deadline_check(session, settings, request) if stream is None else []
    model_not_served(session, settings, request.model or settings.model.served_model_name or "")
    job = submit(session, settings, request)
    return Submitted(job, stream.warnings if stream is not None else warnings)


def submit(
    session: Session, settings: Settings, request: JobRequest, *, publish: bool = True, admit: bool = True
) -> Job:
    """Make the job and start it (``insert``, ``start``); a request whose Idempotency-Key made a job already is
    answered with that job. ``admit=False`` skips the size limit and the tenant's quotas: the embedded runner's
    jobs are the local user's own, under no tenant."""
    try:
        job = insert(session, settings, request, admit=admit)
    except IntegrityError:
        # Another request with this Idempotency-Key inserted first (the key is unique per tenant): its job is
        # the answer. The insert is the check, so concurrent retries make one job and no 500.
        session.rollback()
        key, request_hash = request.idempotency_key, request.request_hash or ""
        if (old := replayed(session, tenant=request.tenant, key=key, request_hash=request_hash)) is None:
            raise
        return old
    start(session, settings, job, publish=publish)
    return job


def insert(session: Session, settings: Settings, request: JobRequest, *, admit: bool = True) -> Job:
    """Check, insert and admit the job (see the module); uncommitted."""
    if isinstance(request.items, ItemStream):
        return _insert_stream(session, settings, request, request.items, admit=admit)
    if admit:
        if request.size > settings.limits.max_items_per_job:
            raise JobRefused(
                TOO_MANY_ITEMS, f"{request.size} items exceed the limit of {settings.limits.max_items_per_job}"
            )
        check_job_size(settings, request.tenant, n_items=request.size)
    deadline_check(session, settings, request)  # refused here with strict_deadline; the warning is the caller's
    model = request.model or settings.model.served_model_name or ""
    if not model and request.lines is None:  # a batch's lines name its model: it is set once they are read
        raise JobRefused(NO_MODEL, "no 'model' given and no default model configured (VLBATCH_MODEL_PATH)")
    size = chunk_size(settings, request.pipeline)
    if request.lines is not None:
        job = batches.new_job(
            session,
            tenant=request.tenant,
            pipeline=request.pipeline,
            model=model,
            options=request.options,
            priority=request.priority,
        )
        batches.add_items(session, job=job, lines=request.lines, chunk_size=size)
    else:
        job = job_store.create_job(
            session,
            pipeline=request.pipeline,
            model=model,
            options=request.options,
            items=request.items,
            chunk_size=size,
            priority=request.priority,
            idempotency_key=request.idempotency_key,
            idempotency_hash=request.request_hash if request.idempotency_key else None,
            output_dir=request.output_dir,
            tenant=request.tenant,
        )
    job.deadline = request.deadline
    if admit:
        admit_inserted_job(session, settings, request.tenant)  # refused: the job is rolled back with the session
    return job


def _insert_stream(
    session: Session, settings: Settings, request: JobRequest, stream: ItemStream, *, admit: bool
) -> Job:
    """``insert`` of an ``ItemStream``: the job's rows first, its items written as the stream is read and refused as
    its count passes a limit (``item_streams.bounded``); then the checks that need the count (the deadline's, with
    the job's own deadline not yet set, so its items are not counted ahead of it), then admitted."""
    model = request.model or settings.model.served_model_name or ""
    if not model:
        raise JobRefused(NO_MODEL, "no 'model' given and no default model configured (VLBATCH_MODEL_PATH)")
    job = job_store.new_job_row(
        session,
        tenant=request.tenant,
        pipeline=request.pipeline,
        model=model,
        options=request.options,
        priority=request.priority,
        total=0,
        idempotency_key=request.idempotency_key,
        idempotency_hash=request.request_hash if request.idempotency_key else None,
        output_dir=request.output_dir,
    )
    items = bounded(stream, settings, request.tenant, admit=admit)
    job_store.add_item_stream(session, job=job, items=items, chunk_size=chunk_size(settings, request.pipeline))
    stream.warnings = deadline_check(session, settings, request)  # refused here with strict_deadline
    job.deadline = request.deadline
    if admit:
        admit_inserted_job(session, settings, request.tenant)
    return job


def dry_run(
    session: Session,
    settings: Settings,
    request: JobRequest,
    *,
    admit: bool = True,
    geometry: Geometry | None = None,
    count_text: TextCounter | None = None,
    planner: Planner | None = None,
) -> Estimate:
    """What ``submit`` would run, estimated and nothing stored (``jobs.estimate``): the same size checks, then the
    items' tokens, the engine time, the energy and cost, and the deadline's verdict (refused with
    ``strict_deadline``, as a submit would be)."""
    if isinstance(request.items, ItemStream):  # estimated from the list, as a listed folder is
        request = replace(request, items=request.items.listed())
    if admit:
        if request.size > settings.limits.max_items_per_job:
            raise JobRefused(
                TOO_MANY_ITEMS, f"{request.size} items exceed the limit of {settings.limits.max_items_per_job}"
            )
        check_job_size(settings, request.tenant, n_items=request.size)
    if not (request.model or settings.model.served_model_name) and request.lines is None:
        raise JobRefused(NO_MODEL, "no 'model' given and no default model configured (VLBATCH_MODEL_PATH)")
    return estimate(session, settings, request, geometry=geometry, count_text=count_text, planner=planner)


def start(session: Session, settings: Settings, job: Job, *, publish: bool = True) -> bool:
    """Commit the inserted ``job`` with its chunks marked sent, then publish them; True when the broker took them.
    ``publish=False``: commit only, the chunks left unmarked for whoever feeds them (the embedded runner), or else
    for the reconciler."""
    if not publish:
        session.commit()
        return False
    chunk_ids = job_store.chunks_of(session, job_id=job.id)
    return send_chunks(session, settings, model=job.model, priority=job.priority, chunk_ids=chunk_ids)


def replayed(session: Session, *, tenant: str, key: str | None, request_hash: str) -> Job | None:
    """The job an earlier request with this Idempotency-Key made for the tenant, if any; a key that came with
    another request (another route or body: ``request_hash``) is refused (409) rather than answered with a job the
    client did not ask for. A job kept without a hash (made before hashes were kept) is answered as before."""
    if not key:
        return None
    old = job_store.get_job_by_idempotency_key(session, key=key, tenant=tenant)
    if old is None:
        return None
    if old.idempotency_hash is not None and old.idempotency_hash != request_hash:
        raise JobRefused(
            IDEMPOTENCY_KEY_REUSED,
            f"Idempotency-Key '{key}' was used for another request (job '{old.id}'); use a new key for a new request",
        )
    return old

"""Job routes: create, read, list, cancel, pause, resume (a job's results and exports: ``api.routes.results``).
Thin: validation in schemas, work in CRUD; a refusal is a ``VlbatchError`` that ``api.errors`` turns into the HTTP
answer."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request
from pydantic import BaseModel, ValidationError
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from api.deps import Principal, PrincipalDep, SessionClosingRoute, SessionDep, SettingsDep
from api.errors import JobNotFound, RequestRefused, errors
from api.quotas import admit_inserted_job, check_job_size, check_new_job
from api.schemas import (
    DocumentIn,
    DocumentJobCreate,
    ItemIn,
    ItemOut,
    JobCreate,
    JobEnergyOut,
    JobOut,
    Page,
    RerunRequest,
    TaggingJobCreate,
)
from pipelines import image_tagging, registry
from pipelines.base import ImagePipeline, Pipeline, PipelineKind
from preprocessing.documents import EXTENSIONS
from vlbatch.db import crud
from vlbatch.db.energy import job_energy
from vlbatch.db.models import Job, PausedQueue
from vlbatch.errors import (
    ACTIVE_JOBS_QUOTA_EXCEEDED,
    BAD_CURSOR,
    IDEMPOTENCY_KEY_REUSED,
    INPUT_PATH_REFUSED,
    INVALID_ITEMS,
    INVALID_OPTIONS,
    ITEMS_QUOTA_EXCEEDED,
    JOB_NOT_FOUND,
    JOB_STATE_CONFLICT,
    NO_INPUTS,
    NO_MODEL,
    NOTHING_TO_RERUN,
    TOO_MANY_ITEMS,
    UNKNOWN_PIPELINE,
    WRONG_PIPELINE_KIND,
)
from vlbatch.inputs import confine, confine_dir, confine_file, iter_files, iter_images
from vlbatch.settings import Settings
from worker.queue import send_chunks

router = APIRouter(route_class=SessionClosingRoute, prefix="/v1/jobs", tags=["jobs"])

# What every route that makes a job from a request can refuse (``_create``, ``_image_items``, ``_document_items``).
NEW_JOB_REFUSALS = (
    IDEMPOTENCY_KEY_REUSED,
    TOO_MANY_ITEMS,
    NO_INPUTS,
    INPUT_PATH_REFUSED,
    NO_MODEL,
    ITEMS_QUOTA_EXCEEDED,
    ACTIVE_JOBS_QUOTA_EXCEEDED,
)


def job_out(session: Session, job: Job, *, price_per_kwh: float | None = None) -> JobOut:
    counts = crud.item_counts(session, job_id=job.id)
    done = counts["succeeded"] + counts["failed"]
    energy = job_energy(job, items_done=done, price_per_kwh=price_per_kwh)
    rate = eta = None
    if job.started_at is not None and done:
        end = job.finished_at or crud.utcnow()
        elapsed = max((end - job.started_at.replace(tzinfo=end.tzinfo)).total_seconds(), 1e-6)
        rate = done / elapsed
        eta = (counts["queued"] + counts["running"]) / rate
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
        energy=JobEnergyOut(
            wh=energy.wh,
            wh_per_1000_items=energy.wh_per_1000_items,
            cost=energy.cost,
            unmetered_tokens=energy.unmetered_tokens,
        ),
    )


def _found(session: Session, job_id: str, principal: Principal) -> Job:
    """The job if the principal may see it; another tenant's job is not found (404), so ids confirm nothing."""
    job = crud.get_job(session, job_id=job_id, tenant=principal.scope)
    if job is None:
        raise JobNotFound(job_id)
    return job


def _served_model(requested: str | None, settings: Settings) -> str:
    model = requested or settings.served_model_name
    if not model:
        raise RequestRefused(NO_MODEL, "no 'model' given and no default model configured (VLBATCH_MODEL_PATH)")
    return model


def _check_size(n_items: int, settings: Settings) -> None:
    if n_items > settings.max_items_per_job:
        raise RequestRefused(TOO_MANY_ITEMS, f"{n_items} items exceed the limit of {settings.max_items_per_job}")


def _check_inline(items: Sequence[ItemIn | DocumentIn], settings: Settings) -> None:
    """Inline items within the per-request caps, checked before any is stored or resolved: so many items, so
    many images an item, sources so long (a data URL is bounded by the body cap alone)."""
    if len(items) > settings.max_items_per_request:
        raise RequestRefused(
            TOO_MANY_ITEMS,
            f"{len(items)} inline items exceed the limit of {settings.max_items_per_request} a request "
            "(VLBATCH_MAX_ITEMS_PER_REQUEST); send a folder, or split the job",
        )
    for n, it in enumerate(items):
        sources = it.images if isinstance(it, ItemIn) else []
        if len(sources) > settings.max_images_per_item:
            raise RequestRefused(
                INVALID_ITEMS,
                f"items[{n}] lists {len(sources)} images; the limit is {settings.max_images_per_item} "
                "(VLBATCH_MAX_IMAGES_PER_ITEM)",
            )
        for k, src in enumerate(sources):
            if len(src) > settings.max_source_chars and not src.startswith("data:"):
                raise RequestRefused(
                    INVALID_ITEMS,
                    f"items[{n}].images[{k}] is {len(src)} characters long; the limit is {settings.max_source_chars}"
                    " (VLBATCH_MAX_SOURCE_CHARS; data URLs excepted)",
                )


def _image_items(
    items: list[ItemIn] | None,
    directory: str | None,
    recursive: bool,
    opts: Any,
    settings: Settings,
    *,
    videos: bool,
) -> Sequence[crud.NewItem]:
    if items is not None:
        _check_inline(items, settings)
        return [crud.NewItem(inputs={"images": it.images}, ref=it.ref) for it in items]
    folder = confine(directory or "", settings.allowed_input_roots)
    roots = settings.allowed_input_roots
    paths = [str(p) for p in iter_images(folder, recursive=recursive, roots=roots, videos=videos)]
    found = crud.items_from_paths(paths, images_per_prompt=getattr(opts, "images_per_prompt", 1))
    if not found:
        raise RequestRefused(NO_INPUTS, f"no images{' or videos' if videos else ''} found under '{directory}'")
    return found


def _document_items(
    items: list[DocumentIn] | None, directory: str | None, recursive: bool, settings: Settings
) -> Sequence[crud.NewItem]:
    if items is not None:
        _check_inline(items, settings)
        paths = [(str(confine_file(it.path, settings.allowed_input_roots)), it.ref) for it in items]
    else:
        folder = confine(directory or "", settings.allowed_input_roots)
        found = iter_files(folder, suffixes=EXTENSIONS, recursive=recursive, roots=settings.allowed_input_roots)
        paths = [(str(p), str(p)) for p in found]
    if not paths:
        raise RequestRefused(NO_INPUTS, f"no documents ({', '.join(sorted(EXTENSIONS))}) under '{directory}'")
    return [crud.NewItem(inputs={"path": p}, ref=ref or p) for p, ref in paths]


def _options(pipeline: Pipeline, raw: dict[str, Any]) -> Any:
    try:
        return pipeline.options(raw)
    except ValidationError as exc:
        raise RequestRefused(INVALID_OPTIONS, f"bad {pipeline.name} options: {exc}") from exc


def _pipeline(name: str, kind: PipelineKind | None = None) -> Pipeline:
    pipeline = registry.get(name)
    if kind is not None and pipeline.kind != kind:
        raise RequestRefused(
            WRONG_PIPELINE_KIND, f"pipeline '{name}' is a {pipeline.kind} pipeline; this route takes {kind} ones"
        )
    return pipeline


def _create(
    session: Session,
    settings: Settings,
    *,
    pipeline: Pipeline,
    opts: Any,
    model: str | None,
    priority: str,
    items: Sequence[crud.NewItem],
    idempotency_key: str | None,
    request_hash: str,
    principal: Principal,
    output_dir: str | None = None,
) -> JobOut:
    _check_size(len(items), settings)
    check_job_size(settings, principal, n_items=len(items))
    try:
        job = crud.create_job(
            session,
            pipeline=pipeline.name,
            model=_served_model(model, settings),
            options=opts.model_dump(),
            items=items,
            chunk_size=_chunk_size(settings, pipeline.name),
            priority=priority,
            idempotency_key=idempotency_key,
            idempotency_hash=request_hash if idempotency_key else None,
            output_dir=output_dir,
            tenant=principal.tenant,
        )
    except IntegrityError:
        # Another request with this Idempotency-Key inserted first (the key is unique per tenant): its job is
        # the answer. The insert is the check, so concurrent retries make one job and no 500.
        session.rollback()
        if (old := _replayed(session, idempotency_key, request_hash, principal)) is None:
            raise
        return old
    admit_inserted_job(session, settings, principal)  # refused: the job is rolled back with the session
    return _enqueue(session, settings, job)


def _request_hash(request: Request, body: BaseModel) -> str:
    """What a request asks for, as kept with its Idempotency-Key: the route and the validated body (so key order,
    spacing and spelled-out defaults do not count as another request)."""
    text = json.dumps([request.url.path, body.model_dump(mode="json")], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _replayed(session: Session, idempotency_key: str | None, request_hash: str, principal: Principal) -> JobOut | None:
    """The job an earlier request with this Idempotency-Key made for the tenant, if any; a key that came with
    another route or body is refused (409) rather than answered with a job the client did not ask for. A job
    kept without a hash (made before hashes were kept) is answered as before."""
    if not idempotency_key:
        return None
    old = crud.get_job_by_idempotency_key(session, key=idempotency_key, tenant=principal.tenant)
    if old is None:
        return None
    if old.idempotency_hash is not None and old.idempotency_hash != request_hash:
        raise RequestRefused(
            IDEMPOTENCY_KEY_REUSED,
            f"Idempotency-Key '{idempotency_key}' was used for another request (job '{old.id}'); use a new key for "
            "a new request",
        )
    return job_out(session, old)


def _confined_output(output_dir: str | None, settings: Settings) -> str | None:
    return str(confine_dir(output_dir, settings.allowed_input_roots)) if output_dir else None


# Visible ASCII only: a key is an opaque token (a UUID, say), and NUL or control characters in it are refused (422)
# before the database sees them.
IdempotencyKey = Annotated[str | None, Header(min_length=1, max_length=200, pattern=r"^[!-~]+$")]


@router.post(
    "",
    status_code=201,
    responses=errors(UNKNOWN_PIPELINE, WRONG_PIPELINE_KIND, INVALID_OPTIONS, INVALID_ITEMS, *NEW_JOB_REFUSALS),
)
def create_job(
    body: JobCreate,
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    principal: PrincipalDep,
    idempotency_key: IdempotencyKey = None,
) -> JobOut:
    """A job of any registered pipeline (``GET /v1/pipelines`` lists them with their options)."""
    request_hash = _request_hash(request, body)
    if (old := _replayed(session, idempotency_key, request_hash, principal)) is not None:
        return old
    pipeline = _pipeline(body.pipeline)
    if pipeline.kind == PipelineKind.REQUEST:  # its items are request bodies in an uploaded batch file
        raise RequestRefused(
            WRONG_PIPELINE_KIND, f"pipeline '{pipeline.name}' takes OpenAI request bodies: submit them to /v1/batches"
        )
    opts = _options(pipeline, body.options)
    try:
        if pipeline.kind == PipelineKind.IMAGE:
            image_in = [ItemIn.model_validate(it) for it in body.items] if body.items is not None else None
            videos = isinstance(pipeline, ImagePipeline) and pipeline.takes_video
            items = _image_items(image_in, body.directory, body.recursive, opts, settings, videos=videos)
        else:
            doc_in = [DocumentIn.model_validate(it) for it in body.items] if body.items is not None else None
            items = _document_items(doc_in, body.directory, body.recursive, settings)
    except ValidationError as exc:
        raise RequestRefused(INVALID_ITEMS, f"bad items for {pipeline.kind} pipeline '{pipeline.name}': {exc}") from exc
    priority = body.priority or ("documents" if pipeline.kind == PipelineKind.DOCUMENT else "batch")
    return _create(
        session,
        settings,
        pipeline=pipeline,
        opts=opts,
        model=body.model,
        priority=priority,
        items=items,
        idempotency_key=idempotency_key,
        request_hash=request_hash,
        principal=principal,
        output_dir=_confined_output(body.output_dir, settings),
    )


@router.post("/tagging", status_code=201, responses=errors(INVALID_ITEMS, *NEW_JOB_REFUSALS))
def create_tagging_job(
    body: TaggingJobCreate,
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    principal: PrincipalDep,
    idempotency_key: IdempotencyKey = None,
) -> JobOut:
    request_hash = _request_hash(request, body)
    if (old := _replayed(session, idempotency_key, request_hash, principal)) is not None:
        return old
    items = _image_items(body.items, body.directory, body.recursive, body.options, settings, videos=True)
    return _create(
        session,
        settings,
        pipeline=_pipeline(image_tagging.NAME),
        opts=body.options,
        model=body.model,
        priority=body.priority,
        items=items,
        idempotency_key=idempotency_key,
        request_hash=request_hash,
        principal=principal,
    )


@router.post(
    "/documents",
    status_code=201,
    responses=errors(UNKNOWN_PIPELINE, WRONG_PIPELINE_KIND, INVALID_OPTIONS, *NEW_JOB_REFUSALS),
)
def create_document_job(
    body: DocumentJobCreate,
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    principal: PrincipalDep,
    idempotency_key: IdempotencyKey = None,
) -> JobOut:
    request_hash = _request_hash(request, body)
    if (old := _replayed(session, idempotency_key, request_hash, principal)) is not None:
        return old
    pipeline = _pipeline(body.pipeline, PipelineKind.DOCUMENT)
    opts = _options(pipeline, body.options)
    output_dir = _confined_output(body.output_dir, settings)
    return _create(
        session,
        settings,
        pipeline=pipeline,
        opts=opts,
        model=body.model,
        priority="documents",
        items=_document_items(body.items, body.directory, body.recursive, settings),
        idempotency_key=idempotency_key,
        request_hash=request_hash,
        principal=principal,
        output_dir=output_dir,
    )


@router.post(
    "/{job_id}/rerun",
    status_code=201,
    responses=errors(JOB_NOT_FOUND, NOTHING_TO_RERUN, ITEMS_QUOTA_EXCEEDED, ACTIVE_JOBS_QUOTA_EXCEEDED),
)
def rerun_job(
    job_id: str, body: RerunRequest, session: SessionDep, settings: SettingsDep, principal: PrincipalDep
) -> JobOut:
    """A new job over the same inputs: all of them, only those that did not succeed ('missing'), or those whose
    processed-with marker differs from now ('refresh'); it belongs to the old job's tenant and counts against
    that tenant's quotas."""
    old = _found(session, job_id, principal)
    owner = Principal(tenant=old.tenant, is_admin=principal.is_admin, key_id=principal.key_id)
    check_new_job(session, settings, owner, n_items=old.total)
    version = registry.get(old.pipeline).version if old.pipeline in registry.names() else None
    job = crud.rerun_job(
        session,
        job=old,
        scope=body.scope,
        chunk_size=_chunk_size(settings, old.pipeline),
        pipeline_version=version,
        model_revision=body.model_revision,
    )
    if job is None:
        raise RequestRefused(NOTHING_TO_RERUN, f"job '{job_id}' has no items to re-run with scope '{body.scope}'")
    return _enqueue(session, settings, job)


def _chunk_size(settings: Settings, pipeline: str) -> int:
    kind = registry.get(pipeline).kind if pipeline in registry.names() else PipelineKind.IMAGE
    return settings.document_chunk_size if kind == PipelineKind.DOCUMENT else settings.chunk_size


def _enqueue(session: Session, settings: Settings, job: Job) -> JobOut:
    chunk_ids = crud.chunks_of(session, job_id=job.id)
    send_chunks(session, settings, model=job.model, priority=job.priority, chunk_ids=chunk_ids)
    return job_out(session, job)


@router.get("", responses=errors(BAD_CURSOR))
def list_jobs(
    session: SessionDep,
    principal: PrincipalDep,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    cursor: Annotated[str | None, Query(max_length=200, description="next_cursor of the previous page.")] = None,
    status: Annotated[str | None, Query(max_length=16, description="Only jobs in this state.")] = None,
) -> Page[JobOut]:
    """The principal's jobs (an admin's: every tenant's), newest first, in keyset pages."""
    jobs = crud.list_jobs(session, tenant=principal.scope, limit=limit, before=_job_cursor(cursor), status=status)
    last = jobs[-1] if len(jobs) == limit else None
    next_cursor = f"{last.created_at.isoformat()}|{last.id}" if last is not None else None
    return Page[JobOut](data=[job_out(session, j) for j in jobs], next_cursor=next_cursor)


def _job_cursor(cursor: str | None) -> tuple[datetime, str] | None:
    if cursor is None:
        return None
    at, _, job_id = cursor.partition("|")
    try:
        return datetime.fromisoformat(at), job_id
    except ValueError as exc:
        raise RequestRefused(BAD_CURSOR, f"bad cursor '{cursor[:80]}'") from exc


@router.get("/{job_id}", responses=errors(JOB_NOT_FOUND))
def read_job(job_id: str, session: SessionDep, principal: PrincipalDep, settings: SettingsDep) -> JobOut:
    return job_out(session, _found(session, job_id, principal), price_per_kwh=settings.price_per_kwh)


@router.post("/{job_id}/cancel", responses=errors(JOB_NOT_FOUND, JOB_STATE_CONFLICT))
def cancel_job(job_id: str, session: SessionDep, principal: PrincipalDep) -> JobOut:
    """Cancel a queued, running or paused job. A finished or cancelled one is refused (409) and left as it is."""
    job = _found(session, job_id, principal)
    if crud.cancel_job(session, job_id=job_id) is None:
        raise RequestRefused(JOB_STATE_CONFLICT, f"job '{job_id}' is {job.status}: an ended job cannot be cancelled")
    session.commit()
    session.refresh(job)
    return job_out(session, job)


@router.post("/{job_id}/pause", responses=errors(JOB_NOT_FOUND, JOB_STATE_CONFLICT))
def pause_job(job_id: str, session: SessionDep, principal: PrincipalDep) -> JobOut:
    """Stop claiming the job's chunks; items workers already hold finish. Resume with /resume."""
    job = _found(session, job_id, principal)
    if not crud.pause_job(session, job_id=job_id):
        raise RequestRefused(JOB_STATE_CONFLICT, f"job '{job_id}' is {job.status}: only a queued or running job pauses")
    session.commit()
    session.refresh(job)
    return job_out(session, job)


@router.post("/{job_id}/resume", responses=errors(JOB_NOT_FOUND, JOB_STATE_CONFLICT))
def resume_job(job_id: str, session: SessionDep, principal: PrincipalDep, settings: SettingsDep) -> JobOut:
    """Resume a paused job: its unfinished chunks are sent to the queue again."""
    job = _found(session, job_id, principal)
    chunk_ids = crud.resume_job(session, job_id=job_id)
    if chunk_ids is None:
        raise RequestRefused(JOB_STATE_CONFLICT, f"job '{job_id}' is {job.status}, not paused")
    send_chunks(session, settings, model=job.model, priority=job.priority, chunk_ids=chunk_ids)
    session.refresh(job)
    return job_out(session, job)


def _cursor(cursor: str | None) -> int:
    if cursor is None:
        return -1
    try:
        seq = int(cursor)
    except ValueError as exc:
        raise RequestRefused(BAD_CURSOR, f"bad cursor '{cursor[:80]}'") from exc
    if not -1 <= seq < 2**63:  # a seq is a BIGINT; anything past it would overflow the driver, not page
        raise RequestRefused(BAD_CURSOR, f"bad cursor '{cursor[:80]}': out of range")
    return seq


@router.get("/{job_id}/items", responses=errors(JOB_NOT_FOUND, BAD_CURSOR))
def list_items(
    job_id: str,
    session: SessionDep,
    principal: PrincipalDep,
    cursor: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    status: str | None = None,
) -> Page[ItemOut]:
    _found(session, job_id, principal)
    rows = crud.list_items(session, job_id=job_id, after_seq=_cursor(cursor), limit=limit, status=status)
    data = [ItemOut.model_validate(r, from_attributes=True) for r in rows]
    return Page[ItemOut](data=data, next_cursor=str(rows[-1].seq) if len(rows) == limit else None)

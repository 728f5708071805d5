"""Job routes: create, read, page, stream, cancel. Thin: validation in schemas, work in CRUD."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Annotated

from fastapi import APIRouter, Header, HTTPException, Query
from fastapi.responses import StreamingResponse
from pydantic import ValidationError
from sqlalchemy.orm import Session

from api.deps import SessionDep, SettingsDep
from api.schemas import DocumentJobCreate, ItemOut, JobOut, Page, RerunRequest, ResultOut, TaggingJobCreate
from pipelines import image_tagging
from pipelines.registry import options_for
from preprocessing.documents import EXTENSIONS
from vlbatch.db import crud
from vlbatch.db.models import Item, Job, Result
from vlbatch.inputs import InputRootError, confine, confine_dir, confine_file, iter_files, iter_images
from vlbatch.settings import Settings
from worker.queue import publish_chunks

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])


def job_out(session: Session, job: Job) -> JobOut:
    counts = crud.item_counts(session, job_id=job.id)
    done = counts["succeeded"] + counts["failed"]
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
    )


def _found(session: Session, job_id: str) -> Job:
    job = crud.get_job(session, job_id=job_id)
    if job is None:
        raise HTTPException(404, f"job '{job_id}' not found")
    return job


def _served_model(requested: str | None, settings: Settings) -> str:
    model = requested or settings.served_model_name
    if not model:
        raise HTTPException(422, "no 'model' given and no default model configured (VLBATCH_MODEL_PATH)")
    return model


def _check_size(n_items: int, settings: Settings) -> None:
    if n_items > settings.max_items_per_job:
        raise HTTPException(422, f"{n_items} items exceed the limit of {settings.max_items_per_job}")


@router.post("/tagging", status_code=201)
def create_tagging_job(
    body: TaggingJobCreate,
    session: SessionDep,
    settings: SettingsDep,
    idempotency_key: Annotated[str | None, Header(max_length=200)] = None,
) -> JobOut:
    if idempotency_key and (old := crud.get_job_by_idempotency_key(session, key=idempotency_key)):
        return job_out(session, old)
    model = _served_model(body.model, settings)
    opts = body.options
    if body.items is not None:
        items = [crud.NewItem(inputs={"images": it.images}, ref=it.ref) for it in body.items]
    else:
        try:
            folder = confine(body.directory or "", settings.allowed_input_roots)
        except InputRootError as exc:
            raise HTTPException(422, str(exc)) from exc
        paths = [str(p) for p in iter_images(folder, recursive=body.recursive, roots=settings.allowed_input_roots)]
        items = crud.items_from_paths(paths, images_per_prompt=opts.images_per_prompt)
        if not items:
            raise HTTPException(422, f"no images found under '{body.directory}'")
    _check_size(len(items), settings)
    job = crud.create_job(
        session,
        pipeline=image_tagging.NAME,
        model=model,
        options=opts.model_dump(),
        items=items,
        chunk_size=settings.chunk_size,
        priority=body.priority,
        idempotency_key=idempotency_key,
    )
    return _enqueue(session, settings, job)


@router.post("/documents", status_code=201)
def create_document_job(
    body: DocumentJobCreate,
    session: SessionDep,
    settings: SettingsDep,
    idempotency_key: Annotated[str | None, Header(max_length=200)] = None,
) -> JobOut:
    if idempotency_key and (old := crud.get_job_by_idempotency_key(session, key=idempotency_key)):
        return job_out(session, old)
    model = _served_model(body.model, settings)
    try:
        opts = options_for(body.pipeline, body.options)
    except ValidationError as exc:
        raise HTTPException(422, f"bad {body.pipeline} options: {exc}") from exc
    try:
        if body.items is not None:
            paths = [(str(confine_file(it.path, settings.allowed_input_roots)), it.ref) for it in body.items]
        else:
            folder = confine(body.directory or "", settings.allowed_input_roots)
            found = iter_files(
                folder, suffixes=EXTENSIONS, recursive=body.recursive, roots=settings.allowed_input_roots
            )
            paths = [(str(p), str(p)) for p in found]
        output_dir = str(confine_dir(body.output_dir, settings.allowed_input_roots)) if body.output_dir else None
    except InputRootError as exc:
        raise HTTPException(422, str(exc)) from exc
    _check_size(len(paths), settings)
    if not paths:
        raise HTTPException(422, f"no documents ({', '.join(sorted(EXTENSIONS))}) under '{body.directory}'")
    job = crud.create_job(
        session,
        pipeline=body.pipeline,
        model=model,
        options=opts.model_dump(),
        items=[crud.NewItem(inputs={"path": p}, ref=ref or p) for p, ref in paths],
        chunk_size=settings.document_chunk_size,
        priority="documents",
        idempotency_key=idempotency_key,
        output_dir=output_dir,
    )
    return _enqueue(session, settings, job)


@router.post("/{job_id}/rerun", status_code=201)
def rerun_job(job_id: str, body: RerunRequest, session: SessionDep, settings: SettingsDep) -> JobOut:
    """A new job over the same inputs: all of them, or only those that did not succeed ('missing')."""
    old = _found(session, job_id)
    job = crud.rerun_job(session, job=old, scope=body.scope, chunk_size=_chunk_size(settings, old.pipeline))
    if job is None:
        raise HTTPException(409, f"job '{job_id}' has no items to re-run with scope '{body.scope}'")
    return _enqueue(session, settings, job)


def _chunk_size(settings: Settings, pipeline: str) -> int:
    return settings.chunk_size if pipeline == image_tagging.NAME else settings.document_chunk_size


def _enqueue(session: Session, settings: Settings, job: Job) -> JobOut:
    chunk_ids = crud.chunks_of(session, job_id=job.id)
    session.commit()  # the DB holds the job before any message names it
    if publish_chunks(settings, model=job.model, priority=job.priority, chunk_ids=chunk_ids):
        crud.mark_enqueued(session, chunk_ids=chunk_ids)
        session.commit()
    return job_out(session, job)


@router.get("/{job_id}")
def read_job(job_id: str, session: SessionDep) -> JobOut:
    return job_out(session, _found(session, job_id))


@router.post("/{job_id}/cancel")
def cancel_job(job_id: str, session: SessionDep) -> JobOut:
    job = _found(session, job_id)
    crud.cancel_job(session, job_id=job_id)
    session.commit()
    session.refresh(job)
    return job_out(session, job)


def _cursor(cursor: str | None) -> int:
    if cursor is None:
        return -1
    try:
        return int(cursor)
    except ValueError as exc:
        raise HTTPException(422, f"bad cursor '{cursor}'") from exc


def _result_out(item: Item, res: Result | None) -> ResultOut:
    out = ResultOut(
        item_id=item.id,
        seq=item.seq,
        ref=item.ref,
        status=item.status,
        error_code=item.error_code,
        error_message=item.error_message,
    )
    if res is not None:
        out = out.model_copy(
            update={
                "output": res.output,
                "raw_text": res.raw_text,
                "prompt_tokens": res.prompt_tokens,
                "completion_tokens": res.completion_tokens,
                "model": res.model,
                "pipeline_version": res.pipeline_version,
                "options_hash": res.options_hash,
            }
        )
    return out


@router.get("/{job_id}/items")
def list_items(
    job_id: str,
    session: SessionDep,
    cursor: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    status: str | None = None,
) -> Page[ItemOut]:
    _found(session, job_id)
    rows = crud.list_items(session, job_id=job_id, after_seq=_cursor(cursor), limit=limit, status=status)
    data = [ItemOut.model_validate(r, from_attributes=True) for r in rows]
    return Page[ItemOut](data=data, next_cursor=str(rows[-1].seq) if len(rows) == limit else None)


@router.get("/{job_id}/results")
def list_results(
    job_id: str,
    session: SessionDep,
    cursor: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> Page[ResultOut]:
    _found(session, job_id)
    rows = crud.list_results(session, job_id=job_id, after_seq=_cursor(cursor), limit=limit)
    data = [_result_out(i, r) for i, r in rows]
    return Page[ResultOut](data=data, next_cursor=str(rows[-1][0].seq) if len(rows) == limit else None)


@router.get("/{job_id}/results.jsonl")
def stream_results(job_id: str, session: SessionDep) -> StreamingResponse:
    _found(session, job_id)

    def lines() -> Iterator[bytes]:
        after = -1
        while rows := crud.list_results(session, job_id=job_id, after_seq=after, limit=1000):
            for i, r in rows:
                yield (json.dumps(_result_out(i, r).model_dump(mode="json")) + "\n").encode()
            after = rows[-1][0].seq

    return StreamingResponse(lines(), media_type="application/x-ndjson")

"""Job routes: create, read, page, stream, cancel, pause, resume, re-run. Adapters: a route parses the request,
calls the jobs service (``jobs.submit``, ``jobs.actions``) or CRUD, and shapes the answer; a refusal is a
``VlbatchError`` that ``api.errors`` turns into the HTTP answer."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from datetime import datetime
from json.encoder import encode_basestring_ascii
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import StreamingResponse
from sqlalchemy.orm import Session

from api.csv_export import csv_rows
from api.deps import Principal, PrincipalDep, SessionClosingRoute, SessionDep, SettingsDep
from api.errors import RequestRefused, errors
from api.job_requests import (
    NEW_JOB_REFUSALS,
    IdempotencyKey,
    documents_of,
    images_of,
    items_of,
    replayed_out,
    request_hash,
    submit_out,
)
from api.job_views import found_job, job_out
from api.schemas import (
    DocumentJobCreate,
    ItemOut,
    JobCreate,
    JobOut,
    Page,
    RerunRequest,
    ResultOut,
    ResultsPage,
    TagEditRequest,
    TaggingJobCreate,
    TagOut,
)
from jobs import actions
from jobs.items import document_items, image_items, options_of, output_dir_of, pipeline_of
from pipelines import image_tagging
from pipelines.base import PipelineKind
from pipelines.parquet_export import parquet_chunks
from vlbatch.db import crud
from vlbatch.db.models import Item, Result
from vlbatch.db.tags import edit_tags, merged_tags, tags_json
from vlbatch.errors import (
    ACTIVE_JOBS_QUOTA_EXCEEDED,
    BAD_CURSOR,
    INVALID_ITEMS,
    INVALID_OPTIONS,
    ITEM_NOT_FOUND,
    ITEMS_QUOTA_EXCEEDED,
    JOB_NOT_FOUND,
    JOB_STATE_CONFLICT,
    NO_RESULT_TO_TAG,
    NOTHING_TO_RERUN,
    UNKNOWN_PIPELINE,
    WRONG_PIPELINE_KIND,
)

router = APIRouter(route_class=SessionClosingRoute, prefix="/v1/jobs", tags=["jobs"])
_found = found_job  # the job if the principal may see it, else not found (404)


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
    hashed = request_hash(request, body)
    if (old := replayed_out(session, idempotency_key, hashed, principal)) is not None:
        return old
    pipeline = pipeline_of(body.pipeline)
    if pipeline.kind == PipelineKind.REQUEST:  # its items are request bodies in an uploaded batch file
        raise RequestRefused(
            WRONG_PIPELINE_KIND, f"pipeline '{pipeline.name}' takes OpenAI request bodies: submit them to /v1/batches"
        )
    opts = options_of(pipeline, body.options)
    items = items_of(body, pipeline, opts, settings)
    priority = body.priority or ("documents" if pipeline.kind == PipelineKind.DOCUMENT else "batch")
    output_dir = output_dir_of(body.output_dir, settings)
    return submit_out(
        session,
        settings,
        principal,
        pipeline=pipeline,
        opts=opts,
        items=items,
        key=idempotency_key,
        hashed=hashed,
        model=body.model,
        priority=priority,
        output_dir=output_dir,
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
    hashed = request_hash(request, body)
    if (old := replayed_out(session, idempotency_key, hashed, principal)) is not None:
        return old
    per_prompt = body.options.images_per_prompt
    inline, folder, recursive = images_of(body.items), body.directory, body.recursive
    items = image_items(
        settings, inline=inline, directory=folder, recursive=recursive, images_per_prompt=per_prompt, videos=True
    )
    pipeline = pipeline_of(image_tagging.NAME)
    return submit_out(
        session,
        settings,
        principal,
        pipeline=pipeline,
        opts=body.options,
        items=items,
        key=idempotency_key,
        hashed=hashed,
        model=body.model,
        priority=body.priority,
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
    hashed = request_hash(request, body)
    if (old := replayed_out(session, idempotency_key, hashed, principal)) is not None:
        return old
    pipeline = pipeline_of(body.pipeline, PipelineKind.DOCUMENT)
    opts = options_of(pipeline, body.options)
    output_dir = output_dir_of(body.output_dir, settings)
    inline, folder, recursive = documents_of(body.items), body.directory, body.recursive
    items = document_items(settings, inline=inline, directory=folder, recursive=recursive)
    return submit_out(
        session,
        settings,
        principal,
        pipeline=pipeline,
        opts=opts,
        items=items,
        key=idempotency_key,
        hashed=hashed,
        model=body.model,
        priority="documents",
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
    new = actions.rerun(session, settings, old, scope=body.scope, model_revision=body.model_revision)
    return job_out(session, new)


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
    return job_out(session, actions.cancel(session, _found(session, job_id, principal)))


@router.post("/{job_id}/pause", responses=errors(JOB_NOT_FOUND, JOB_STATE_CONFLICT))
def pause_job(job_id: str, session: SessionDep, principal: PrincipalDep) -> JobOut:
    """Stop claiming the job's chunks; items workers already hold finish. Resume with /resume."""
    return job_out(session, actions.pause(session, _found(session, job_id, principal)))


@router.post("/{job_id}/resume", responses=errors(JOB_NOT_FOUND, JOB_STATE_CONFLICT))
def resume_job(job_id: str, session: SessionDep, principal: PrincipalDep, settings: SettingsDep) -> JobOut:
    """Resume a paused job: its unfinished chunks are sent to the queue again."""
    return job_out(session, actions.resume(session, settings, _found(session, job_id, principal)))


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
                "tags": _tags_out(res.tags if res.tags is not None else merged_tags(res.output, [])),
            }
        )
    return out


ItemId = Annotated[int, Path(ge=1, le=2**62, description="The item's id (``item_id`` of its result).")]


def _tags_out(tags: list[Any] | None) -> list[TagOut] | None:
    return [TagOut.model_validate(t) for t in tags] if tags is not None else None


def edit_item_tags(
    session: Session, *, job_id: str, item_id: int, add: Sequence[str], remove: Sequence[str], principal: Principal
) -> ResultOut:
    """Add and remove tags on an item's result by hand, as ``principal`` (the API's route and the dashboard's
    form); the job must be the principal's to see. Committed."""
    _found(session, job_id, principal)
    item = session.get(Item, item_id)
    if item is None or item.job_id != job_id:
        raise RequestRefused(ITEM_NOT_FOUND, f"job '{job_id}' has no item {item_id}")
    if edit_tags(session, item_id=item_id, add=add, remove=remove, author=principal.who) is None:
        raise RequestRefused(NO_RESULT_TO_TAG, f"item {item_id} is {item.status} and has no result to tag yet")
    session.commit()
    return _result_out(item, session.get(Result, item_id))


@router.patch("/{job_id}/items/{item_id}/tags", responses=errors(JOB_NOT_FOUND, ITEM_NOT_FOUND, NO_RESULT_TO_TAG))
def patch_item_tags(
    job_id: str, item_id: ItemId, body: TagEditRequest, session: SessionDep, principal: PrincipalDep
) -> ResultOut:
    """Add or remove tags on an item's result by hand. A manual tag records who and when; re-runs (missing, all,
    refresh, retry of failed items) replace the model's tags and keep these, removals included."""
    add, remove = body.add, body.remove
    return edit_item_tags(session, job_id=job_id, item_id=item_id, add=add, remove=remove, principal=principal)


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


@router.get("/{job_id}/results", responses=errors(JOB_NOT_FOUND, BAD_CURSOR))
def list_results(
    job_id: str,
    session: SessionDep,
    principal: PrincipalDep,
    cursor: Annotated[
        str | None, Query(max_length=200, description="next_cursor or resume_cursor of an earlier page.")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> ResultsPage:
    """Finished items with their results, in the order they were written (not seq order: items finish out of
    order). Page until ``next_cursor`` is null; to follow a running job, ask again later with ``resume_cursor``."""
    _found(session, job_id, principal)
    after = _written_cursor(cursor)
    rows = crud.list_results(session, job_id=job_id, after_written=after, limit=limit)
    data = [_result_out(i, r) for i, r in rows]
    end = f"w:{rows[-1][0].written_seq}" if rows else f"w:{after}"
    return ResultsPage(data=data, next_cursor=end if len(rows) == limit else None, resume_cursor=end)


def _written_cursor(cursor: str | None) -> int:
    """A results cursor, ``w:<position>``: the write position the page starts after."""
    if cursor is None:
        return -1
    kind, sep, position = cursor.partition(":")
    if kind != "w" or not sep:
        raise RequestRefused(BAD_CURSOR, f"bad cursor '{cursor[:80]}': a results cursor reads 'w:<n>'")
    return _cursor(position)


@router.get("/{job_id}/results.jsonl", responses=errors(JOB_NOT_FOUND))
def stream_results(job_id: str, session: SessionDep, request: Request, principal: PrincipalDep) -> StreamingResponse:
    """Every finished item as one JSON line (the fields of ``ResultOut``), in seq order.

    One query read a page at a time (``crud.iter_results``); each page is written as one chunk of lines,
    encoded from plain tuples (no ORM objects, no pydantic per row). The stream reads through a session of
    its own, closed when the stream ends (or is dropped by a client that hung up), so the cursor never
    outlives the connection it runs on.
    """
    _found(session, job_id, principal)
    session.close()
    sessions = request.app.state.sessionmaker

    def chunks() -> Iterator[bytes]:
        with sessions() as s:
            for page in crud.iter_results(s, job_id=job_id, page_size=EXPORT_PAGE_ROWS):
                yield _jsonl(page)

    return StreamingResponse(chunks(), media_type="application/x-ndjson")


@router.get("/{job_id}/results.csv", responses=errors(JOB_NOT_FOUND))
def stream_results_csv(
    job_id: str, session: SessionDep, request: Request, principal: PrincipalDep
) -> StreamingResponse:
    """Every finished item as a CSV row (``api.csv_export``: tags joined by ';', caption, the output's JSON),
    streamed a page at a time like the JSONL export."""
    _found(session, job_id, principal)
    session.close()
    sessions = request.app.state.sessionmaker

    def chunks() -> Iterator[bytes]:
        yield csv_rows([], header=True)
        with sessions() as s:
            for page in crud.iter_results(s, job_id=job_id, page_size=EXPORT_PAGE_ROWS):
                yield csv_rows(page, header=False)

    headers = {"Content-Disposition": f'attachment; filename="{job_id}.csv"'}
    return StreamingResponse(chunks(), media_type="text/csv; charset=utf-8", headers=headers)


@router.get("/{job_id}/results.parquet", responses=errors(JOB_NOT_FOUND))
def stream_results_parquet(
    job_id: str, session: SessionDep, request: Request, principal: PrincipalDep
) -> StreamingResponse:
    """Every finished item as a Parquet row (``pipelines.parquet_export``: typed columns, ``tags`` a list of
    strings with ``tag_sources`` beside it), one row group per page read, streamed like the JSONL export."""
    _found(session, job_id, principal)
    session.close()
    sessions = request.app.state.sessionmaker

    def chunks() -> Iterator[bytes]:
        with sessions() as s:
            yield from parquet_chunks(crud.iter_results(s, job_id=job_id, page_size=EXPORT_PAGE_ROWS))

    headers = {"Content-Disposition": f'attachment; filename="{job_id}.parquet"'}
    return StreamingResponse(chunks(), media_type="application/vnd.apache.parquet", headers=headers)


EXPORT_PAGE_ROWS = 2000  # rows read and written per chunk (a Parquet row group) by the exports


_LINE = (
    '{"item_id": %d, "seq": %d, "ref": %s, "status": %s, "error_code": %s, "error_message": %s, "output": %s, '
    '"raw_text": %s, "prompt_tokens": %d, "completion_tokens": %d, "model": %s, "pipeline_version": %s, '
    '"options_hash": %s, "tags": %s}\n'
)


def _json_text(text: str | None) -> str:
    """Stored JSON text as it goes into a line: as is when it is one ASCII line (what ``json.dumps``, which
    wrote it, gives again), else decoded and encoded again."""
    if text is None:
        return "null"
    if text.isascii() and "\n" not in text and "\r" not in text:
        return text
    return json.dumps(json.loads(text))


def _jsonl(page: Sequence[tuple[Any, ...]]) -> bytes:
    """``crud.RESULT_COLUMNS`` rows as JSON lines: byte for byte ``json.dumps(ResultOut.model_dump(mode="json"))``
    for each, built by formatting (about three times faster than a dict through ``json.dumps``). Strings go
    through ``json``'s own escaping; the NOT NULL columns (status; model, version and hash of a result) skip
    the None check."""
    enc = encode_basestring_ascii
    lines = []
    for row in page:
        item_id, seq, ref, status, code, message, res_id, output, raw, p_tok, c_tok, model, version, o_hash, tags = row
        head = (
            item_id,
            seq,
            "null" if ref is None else enc(ref),
            enc(status),
            "null" if code is None else enc(code),
            "null" if message is None else enc(message),
        )
        if res_id is None:
            tail: tuple[Any, ...] = ("null", "null", 0, 0, "null", "null", "null", "null")
        else:
            raw_text = "null" if raw is None else enc(raw)
            tag_text = _json_text(tags_json(tags, output))
            tail = (_json_text(output), raw_text, p_tok, c_tok, enc(model), enc(version), enc(o_hash), tag_text)
        lines.append(_LINE % (*head, *tail))
    return "".join(lines).encode()

"""Result routes: a job's results by page, its exports (JSONL, CSV, Parquet) and tag edits by hand. Thin: the
records come from ``vlbatch.db.results``, every export's bytes from its writer in ``jobs.exports`` (the same
writers ``vlbatch tag --out`` writes files with), a tag edit from the jobs service (``jobs.actions.edit_tags``, as
the dashboard's form)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Generator
from typing import Annotated

import anyio
from fastapi import APIRouter, Query, Request
from fastapi.responses import StreamingResponse
from sqlalchemy.orm import Session
from starlette.concurrency import iterate_in_threadpool

from api.deps import Principal, PrincipalDep, SessionClosingRoute, SessionDep, SettingsDep
from api.http_errors import errors
from api.job_views import found_job
from api.params import ItemId, written_cursor
from api.schemas import ResultOut, ResultsPage, TagEditRequest
from jobs import actions
from jobs.exports.files import PAGE_ROWS, JobExport
from vlbatch.db import results as db_results
from vlbatch.db.result_fields import EXPORTED
from vlbatch.db.results import ResultRecord
from vlbatch.errors import BAD_CURSOR, ITEM_NOT_FOUND, JOB_NOT_FOUND, NO_RESULT_TO_TAG, TOO_MANY_MANUAL_TAGS

router = APIRouter(route_class=SessionClosingRoute, prefix="/v1/jobs", tags=["jobs"])

EXPORT_PAGE_ROWS = PAGE_ROWS  # rows read and written per chunk (a Parquet row group) by the exports


def result_out(record: ResultRecord) -> ResultOut:
    """A record as the API answers it: its ``EXPORTED`` fields (``vlbatch.db.result_fields``), ``output`` and
    ``tags`` decoded; the JSONL export writes the same fields (``jobs.exports.jsonl``)."""
    return ResultOut.model_validate({name: getattr(record, name) for name in EXPORTED})


@router.patch(
    "/{job_id}/items/{item_id}/tags",
    responses=errors(JOB_NOT_FOUND, ITEM_NOT_FOUND, NO_RESULT_TO_TAG, TOO_MANY_MANUAL_TAGS),
)
def patch_item_tags(
    job_id: str,
    item_id: ItemId,
    body: TagEditRequest,
    session: SessionDep,
    settings: SettingsDep,
    principal: PrincipalDep,
) -> ResultOut:
    """Add or remove tags on an item's result by hand. A manual tag records who and when; re-runs (missing, all,
    refresh, retry of failed items) replace the model's tags and keep these, removals included."""
    job = found_job(session, job_id, principal)
    record = actions.edit_tags(
        session, settings, job, item_id=item_id, add=body.add, remove=body.remove, author=principal.who
    )
    return result_out(record)


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
    found_job(session, job_id, principal)
    after = written_cursor(cursor)
    rows = db_results.list_results(session, job_id=job_id, after_written=after, limit=limit)
    data = [result_out(record) for _, record in rows]
    end = f"w:{rows[-1][0]}" if rows else f"w:{after}"
    return ResultsPage(data=data, next_cursor=end if len(rows) == limit else None, resume_cursor=end)


def _export(fmt: str, job_id: str, session: Session, request: Request, principal: Principal) -> AsyncIterator[bytes]:
    """The job's export in ``fmt``, read one page at a time and written by its writer (``JobExport``). The
    stream reads through a session of its own, closed when the stream ends (also when a client hangs up:
    ``_closed_at_the_end``), so the query never outlives the connection it runs on."""
    pipeline = found_job(session, job_id, principal).pipeline
    session.close()
    sessions = request.app.state.sessionmaker

    def chunks() -> Generator[bytes, None, None]:
        with sessions() as s:
            yield from JobExport(fmt, s, job_id=job_id, pipeline=pipeline, page_size=EXPORT_PAGE_ROWS)

    return _closed_at_the_end(chunks())


async def _closed_at_the_end(chunks: Generator[bytes, None, None]) -> AsyncIterator[bytes]:
    """``chunks`` read in the thread pool, and closed there when the response ends however it ends. A client that
    hangs up mid-export ends the response early: its reader thread and its query end now, and its session's
    connection goes back to the pool. Left to the garbage collector, an export's connection (held by its streamed
    query while the export waits) could be collected first, in another request's thread, whose rollback of it
    would wait for the export that nobody reads."""
    try:
        async for chunk in iterate_in_threadpool(chunks):
            yield chunk
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(chunks.close)


@router.get("/{job_id}/results.jsonl", responses=errors(JOB_NOT_FOUND))
def stream_results(job_id: str, session: SessionDep, request: Request, principal: PrincipalDep) -> StreamingResponse:
    """Every finished item as one JSON line (the fields of ``ResultOut``), in seq order, a page at a time."""
    return StreamingResponse(_export("jsonl", job_id, session, request, principal), media_type="application/x-ndjson")


@router.get("/{job_id}/results.csv", responses=errors(JOB_NOT_FOUND))
def stream_results_csv(
    job_id: str, session: SessionDep, request: Request, principal: PrincipalDep
) -> StreamingResponse:
    """Every finished item as a CSV row (``jobs.exports.csv_writer``: tags joined by ';', caption, the output's
    JSON, then the pipeline's own columns), streamed a page at a time like the JSONL export."""
    headers = {"Content-Disposition": f'attachment; filename="{job_id}.csv"'}
    chunks = _export("csv", job_id, session, request, principal)
    return StreamingResponse(chunks, media_type="text/csv; charset=utf-8", headers=headers)


@router.get("/{job_id}/results.parquet", responses=errors(JOB_NOT_FOUND))
def stream_results_parquet(
    job_id: str, session: SessionDep, request: Request, principal: PrincipalDep
) -> StreamingResponse:
    """Every finished item as a Parquet row (``jobs.exports.parquet``: typed columns, ``tags`` a list of strings
    with ``tag_sources`` beside it), one row group per page read, streamed like the JSONL export."""
    headers = {"Content-Disposition": f'attachment; filename="{job_id}.parquet"'}
    chunks = _export("parquet", job_id, session, request, principal)
    return StreamingResponse(chunks, media_type="application/vnd.apache.parquet", headers=headers)

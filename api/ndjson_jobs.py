"""A job from an NDJSON upload (``POST /v1/jobs/ndjson``, ``Content-Type: application/x-ndjson``): the job's head
(``NdjsonJobHead``) on the first line, then one item a line in the shape ``POST /v1/jobs`` takes in its ``items``.

The body is read as it streams in, a network chunk at a time, and split into lines bounded by
``VLBATCH_MAX_ITEM_LINE_BYTES`` (413 ``item_line_too_long``); each item line is checked and confined as a JSON
body's item is (the common shape without the model: ``api.ndjson_items``) and handed to the jobs service as an
``ItemStream`` (``jobs.item_streams``), which inserts it with the others a batch at a time, each batch written while
the next is read. So an upload of millions of items holds one network chunk, one line and two batches of items,
never the list. A bad line refuses the whole job with its line number (numbered from 1, the head included, blank
lines counted) and nothing is stored: the job's rows are rolled back with the request's transaction. The answer (201
with the job) comes once every line is stored and the job committed.

An Idempotency-Key is checked against the route and the head line, not the item lines (which are read only after
the check): a retry with the same key and head is answered with the first upload's job.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator

from anyio import from_thread
from fastapi import Request
from pydantic import ValidationError
from sqlalchemy.orm import Session

from api.deps import Principal
from api.http_errors import RequestRefused
from api.job_requests import replayed_out
from api.job_views import job_out
from api.ndjson_items import document_line, image_line
from api.schemas import JobOut, NdjsonJobHead
from jobs.item_streams import ItemStream
from jobs.new_items import document_item, image_item, options_of, output_dir_of, pipeline_of
from jobs.refusals import JobRefused
from jobs.request import JobRequest
from jobs.submit import create
from pipelines.base import Pipeline, PipelineKind
from vlbatch.db import job_store, tenants
from vlbatch.errors import (
    INVALID_ITEMS,
    INVALID_REQUEST,
    ITEM_LINE_TOO_LONG,
    NO_INPUTS,
    WRONG_PIPELINE_KIND,
    VlbatchError,
)
from vlbatch.paths import Confinement
from vlbatch.settings import Settings

NDJSON_TYPES = ("application/x-ndjson", "application/jsonl", "application/json-lines")


def body_lines(request: Request, *, max_line: int) -> Iterator[tuple[int, bytes]]:
    """(line number, line) of ``request``'s body as it streams in, blank lines skipped (but counted), a line's ``\\r``
    dropped. For a sync route (it runs in a worker thread): each network chunk is awaited on the event loop."""
    chunks = request.stream()

    async def pull() -> bytes | None:
        try:
            return await chunks.__anext__()
        except StopAsyncIteration:
            return None

    pending = bytearray()
    number = 0
    while (chunk := from_thread.run(pull)) is not None:
        pending.extend(chunk)
        start = 0
        while (end := pending.find(b"\n", start)) >= 0:
            number += 1
            if end - start > max_line:
                raise _too_long(number, max_line)
            line = bytes(pending[start:end]).rstrip(b"\r")
            if line.strip():
                yield number, line
            start = end + 1
        del pending[:start]
        if len(pending) > max_line:  # no end in sight: refused before more of it is held
            raise _too_long(number + 1, max_line)
    if pending.strip():
        yield number + 1, bytes(pending).rstrip(b"\r")


def _too_long(number: int, max_line: int) -> RequestRefused:
    return RequestRefused(
        ITEM_LINE_TOO_LONG, f"line {number} is longer than {max_line} bytes (VLBATCH_MAX_ITEM_LINE_BYTES)"
    )


def head_of(lines: Iterator[tuple[int, bytes]]) -> tuple[NdjsonJobHead, str]:
    """The job's head, the first line, and its JSON as the Idempotency-Key's request is kept."""
    first = next(lines, None)
    if first is None:
        raise RequestRefused(INVALID_REQUEST, "the upload is empty: line 1 is the job's head, items follow")
    number, line = first
    try:
        head = NdjsonJobHead.model_validate_json(line)
    except ValidationError as exc:
        raise RequestRefused(INVALID_REQUEST, f"line {number} (the job's head): {_faults(exc)}") from None
    return head, json.dumps(head.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))


def _faults(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'line'}: {e['msg']}" for e in exc.errors()[:3])


def item_lines(
    lines: Iterator[tuple[int, bytes]], pipeline: Pipeline, settings: Settings, roots: tenants.Roots
) -> Iterator[job_store.NewItem]:
    """Each item line as a checked, confined item; the first bad one refuses the job, named by its line number."""
    rule = Confinement(roots.inputs)  # the roots resolved once for every line
    images = pipeline.kind == PipelineKind.IMAGE
    for number, line in lines:
        try:
            if images:
                sources, ref = image_line(line)
                item = image_item(settings, sources, ref, roots=rule, s3_prefixes=roots.s3_prefixes)
            else:
                path, ref = document_line(line)
                item = document_item(path, ref, roots=rule)
        except ValidationError as exc:
            raise RequestRefused(INVALID_ITEMS, f"line {number}: not a {pipeline.kind} item ({_faults(exc)})") from None
        except VlbatchError as exc:  # outside the roots, too many images: the item's own refusal, placed
            raise RequestRefused(exc.code, f"line {number}: {exc.message}") from None
        yield item


def create_from_lines(
    session: Session, settings: Settings, principal: Principal, *, request: Request, key: str | None
) -> JobOut:
    """The job of an NDJSON upload (see the module), made by the jobs service (``jobs.submit.create``)."""
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type not in NDJSON_TYPES:
        raise RequestRefused(
            INVALID_REQUEST, f"send the job as Content-Type application/x-ndjson, not '{content_type[:80]}'"
        )
    lines = body_lines(request, max_line=settings.limits.max_item_line_bytes)
    head, head_json = head_of(lines)
    hashed = hashlib.sha256(f"{request.url.path}\n{head_json}".encode()).hexdigest()
    if (old := replayed_out(session, settings, key, hashed, principal)) is not None:
        return old
    pipeline = pipeline_of(head.pipeline)
    if pipeline.kind == PipelineKind.REQUEST:
        raise RequestRefused(
            WRONG_PIPELINE_KIND, f"pipeline '{pipeline.name}' takes OpenAI request bodies: submit them to /v1/batches"
        )
    opts = options_of(pipeline, head.options)
    roots = tenants.roots_of(session, settings, principal.tenant)
    stream = ItemStream(
        lambda: item_lines(lines, pipeline, settings, roots),
        empty=JobRefused(NO_INPUTS, "the upload holds no item line after its head"),
    )
    made = create(
        session,
        settings,
        JobRequest(
            pipeline=pipeline.name,
            options=opts.model_dump(),
            items=stream,
            tenant=principal.tenant,
            idempotency_key=key,
            request_hash=hashed,
            model=head.model,
            priority=head.priority or ("documents" if pipeline.kind == PipelineKind.DOCUMENT else "batch"),
            output_dir=output_dir_of(head.output_dir, roots.outputs),
            deadline=head.deadline,
            strict_deadline=head.strict_deadline,
        ),
    )
    out = job_out(session, settings, made.job)
    out.warnings = made.warnings + out.warnings
    return out

"""OpenAI-compatible Files API: upload (multipart, streamed to disk under ``VLBATCH_MAX_UPLOAD_BYTES``), list,
retrieve, content, delete. Thin: the rows are ``vlbatch.db.batches``, the bytes ``vlbatch.db.filestore``."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import StreamingResponse
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from api.batch_views import epoch
from api.deps import PrincipalDep, SessionClosingRoute, SessionDep, SettingsDep
from api.http_errors import RequestRefused, errors
from api.openai_schemas import FileDeleted, FileList, FileObject
from api.upload_stream import Upload, receive_upload
from jobs import expiry
from jobs.batches import found_file, store
from jobs.quotas import admit_inserted_upload, check_upload, upload_room, uploads_full
from vlbatch.db import batches, retention
from vlbatch.db.filestore import TooLarge
from vlbatch.db.models import StoredFile
from vlbatch.errors import (
    FILE_CONTENT_MISSING,
    FILE_NOT_FOUND,
    INVALID_BATCH,
    INVALID_EXPIRY,
    INVALID_FILE_NAME,
    UPLOAD_QUOTA_EXCEEDED,
    UPLOAD_TOO_LARGE,
    UPLOADS_HELD_QUOTA_EXCEEDED,
    VlbatchError,
)
from vlbatch.settings import Settings

router = APIRouter(route_class=SessionClosingRoute, prefix="/v1/files", tags=["files"])
PURPOSES = ("batch",)


def file_out(row: StoredFile, rules: retention.Policy) -> FileObject:
    """``rules``: the retention that says when the file is deleted (``expires_at``; None: kept for ever)."""
    return FileObject(
        id=row.id,
        bytes=row.bytes,
        created_at=epoch(row.created_at) or 0,
        filename=row.filename,
        purpose=row.purpose,
        expires_at=epoch(retention.file_expires_at(row, rules)),
    )


_UPLOAD_FORM = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file", "purpose"],
                    "properties": {
                        "file": {"type": "string", "format": "binary"},
                        "purpose": {"type": "string", "enum": list(PURPOSES)},
                        "expires_after[anchor]": {"type": "string", "enum": ["created_at"]},
                        "expires_after[seconds]": {"type": "integer", "minimum": 3600, "maximum": 2592000},
                    },
                }
            }
        },
    }
}


@router.post(
    "",
    responses=errors(
        INVALID_BATCH,
        INVALID_EXPIRY,
        INVALID_FILE_NAME,
        UPLOAD_QUOTA_EXCEEDED,
        UPLOAD_TOO_LARGE,
        UPLOADS_HELD_QUOTA_EXCEEDED,
    ),
    openapi_extra=_UPLOAD_FORM,
)
async def upload_file(
    request: Request, session: SessionDep, settings: SettingsDep, principal: PrincipalDep
) -> FileObject:
    """The file is written to the store as it streams in (``api.upload_stream``), refused the moment it passes
    the upload cap or the tenant's quota; the key was checked before any of it was read (``api.key_gate``)."""
    cap = settings.uploads.max_upload_bytes
    quota = settings.quotas.quota(principal.tenant).max_upload_bytes
    room = await run_in_threadpool(_room, session, settings, principal.tenant)
    limit = min(b for b in (cap, quota, room) if b is not None)

    def too_large(size: int) -> VlbatchError:
        check_upload(settings, principal.tenant, n_bytes=size)  # raises when the tenant's quota is the bound
        if room is not None and size > room:  # the tenant's uploads held are the bound
            return uploads_full(settings, principal.tenant, room=room)
        return TooLarge(f"the file is bigger than the limit of {cap} bytes (VLBATCH_MAX_UPLOAD_BYTES)")

    fs = store(settings)
    upload = await receive_upload(request, fs, max_bytes=limit, too_large=too_large)
    assert upload.stored_as is not None
    try:
        purpose = upload.fields.get("purpose")
        if purpose not in PURPOSES:
            raise RequestRefused(INVALID_BATCH, f"purpose '{purpose}' is not one of {', '.join(PURPOSES)}")
        keep_s = expiry.from_form(upload.fields)
        return await run_in_threadpool(_record, session, settings, principal.tenant, upload, purpose, keep_s)
    except BaseException:
        fs.delete(upload.stored_as)  # no row names these bytes: they go, whatever failed
        raise


def _room(session: Session, settings: Settings, tenant: str) -> int | None:
    """``upload_room``, its read transaction ended before the body streams in."""
    try:
        return upload_room(session, settings, tenant)
    finally:
        session.rollback()


def _record(
    session: Session, settings: Settings, tenant: str, upload: Upload, purpose: str, keep_s: int | None
) -> FileObject:
    assert upload.stored_as is not None
    try:
        row = batches.create_file(
            session,
            tenant=tenant,
            filename=upload.filename or "upload.jsonl",
            purpose=purpose,
            size=upload.size,
            stored_as=upload.stored_as,
            expires_after_s=keep_s,
        )
        admit_inserted_upload(session, settings, tenant)
        session.commit()
        return file_out(row, retention.policy(session, settings))
    finally:
        session.close()


@router.get("")
def list_files(
    session: SessionDep,
    settings: SettingsDep,
    principal: PrincipalDep,
    purpose: str | None = None,
    limit: Annotated[int, Query(ge=1, le=10000)] = 100,
    after: str | None = None,
) -> FileList:
    rows = batches.list_files(session, scope=principal.scope, purpose=purpose, limit=limit + 1, after=after)
    rules = retention.policy(session, settings)
    data = [file_out(r, rules) for r in rows[:limit]]
    return FileList(
        data=data,
        first_id=data[0].id if data else None,
        last_id=data[-1].id if data else None,
        has_more=len(rows) > limit,
    )


@router.get("/{file_id}", responses=errors(FILE_NOT_FOUND))
def retrieve_file(file_id: str, session: SessionDep, settings: SettingsDep, principal: PrincipalDep) -> FileObject:
    return file_out(found_file(session, scope=principal.scope, file_id=file_id), retention.policy(session, settings))


@router.get("/{file_id}/content", responses=errors(FILE_NOT_FOUND, FILE_CONTENT_MISSING))
def file_content(
    file_id: str, session: SessionDep, settings: SettingsDep, principal: PrincipalDep
) -> StreamingResponse:
    row = found_file(session, scope=principal.scope, file_id=file_id)
    # Opened before the answer starts: bytes that are gone are a 410 with its code, not a 200 cut short.
    return StreamingResponse(store(settings).read(row.stored_as), media_type="application/jsonl")


@router.delete("/{file_id}", responses=errors(FILE_NOT_FOUND))
def delete_file(file_id: str, session: SessionDep, settings: SettingsDep, principal: PrincipalDep) -> FileDeleted:
    row = found_file(session, scope=principal.scope, file_id=file_id)
    stored_as = row.stored_as
    batches.delete_file(session, row=row)
    session.commit()
    store(settings).delete(stored_as)
    return FileDeleted(id=file_id)

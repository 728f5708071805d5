"""OpenAI-compatible Files API: upload (multipart, streamed to disk under ``VLBATCH_MAX_UPLOAD_BYTES``), list,
retrieve, content, delete. Thin: the rows are ``vlbatch.db.batches``, the bytes ``vlbatch.db.filestore``."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, File, Form, Query, UploadFile
from fastapi.responses import StreamingResponse

from api.batch_service import epoch, found_file, store
from api.deps import PrincipalDep, SessionClosingRoute, SessionDep, SettingsDep
from api.errors import RequestRefused, errors
from api.openai_schemas import FileDeleted, FileList, FileObject
from jobs.quotas import check_upload
from vlbatch.db import batches
from vlbatch.db.models import StoredFile
from vlbatch.errors import FILE_NOT_FOUND, INVALID_BATCH, UPLOAD_QUOTA_EXCEEDED, UPLOAD_TOO_LARGE

router = APIRouter(route_class=SessionClosingRoute, prefix="/v1/files", tags=["files"])
PURPOSES = ("batch",)


def file_out(row: StoredFile) -> FileObject:
    return FileObject(
        id=row.id, bytes=row.bytes, created_at=epoch(row.created_at) or 0, filename=row.filename, purpose=row.purpose
    )


@router.post("", responses=errors(INVALID_BATCH, UPLOAD_QUOTA_EXCEEDED, UPLOAD_TOO_LARGE))
def upload_file(
    session: SessionDep,
    settings: SettingsDep,
    principal: PrincipalDep,
    file: Annotated[UploadFile, File()],
    purpose: Annotated[str, Form()],
) -> FileObject:
    if purpose not in PURPOSES:
        raise RequestRefused(INVALID_BATCH, f"purpose '{purpose}' is not one of {', '.join(PURPOSES)}")
    check_upload(settings, principal.tenant, n_bytes=file.size or 0)  # the tenant's quota, before storing
    name, size = store(settings).write_from(file.file, max_bytes=settings.max_upload_bytes)
    row = batches.create_file(
        session,
        tenant=principal.tenant,
        filename=file.filename or "upload.jsonl",
        purpose=purpose,
        size=size,
        stored_as=name,
    )
    session.commit()
    return file_out(row)


@router.get("")
def list_files(
    session: SessionDep,
    principal: PrincipalDep,
    purpose: str | None = None,
    limit: Annotated[int, Query(ge=1, le=10000)] = 100,
    after: str | None = None,
) -> FileList:
    rows = batches.list_files(session, scope=principal.scope, purpose=purpose, limit=limit + 1, after=after)
    data = [file_out(r) for r in rows[:limit]]
    return FileList(
        data=data,
        first_id=data[0].id if data else None,
        last_id=data[-1].id if data else None,
        has_more=len(rows) > limit,
    )


@router.get("/{file_id}", responses=errors(FILE_NOT_FOUND))
def retrieve_file(file_id: str, session: SessionDep, principal: PrincipalDep) -> FileObject:
    return file_out(found_file(session, scope=principal.scope, file_id=file_id))


@router.get("/{file_id}/content", responses=errors(FILE_NOT_FOUND))
def file_content(
    file_id: str, session: SessionDep, settings: SettingsDep, principal: PrincipalDep
) -> StreamingResponse:
    row = found_file(session, scope=principal.scope, file_id=file_id)
    return StreamingResponse(store(settings).read(row.stored_as), media_type="application/jsonl")


@router.delete("/{file_id}", responses=errors(FILE_NOT_FOUND))
def delete_file(file_id: str, session: SessionDep, settings: SettingsDep, principal: PrincipalDep) -> FileDeleted:
    row = found_file(session, scope=principal.scope, file_id=file_id)
    stored_as = row.stored_as
    batches.delete_file(session, row=row)
    session.commit()
    store(settings).delete(stored_as)
    return FileDeleted(id=file_id)

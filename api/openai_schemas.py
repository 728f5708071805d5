"""Request and response models of the OpenAI-compatible Files and Batches API (the shapes OpenAI's client parses)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, StringConstraints

from api.schemas import Strict
from pipelines.chat import RequestOptions

_MetaKey = Annotated[str, StringConstraints(max_length=64)]
_MetaValue = Annotated[str, StringConstraints(max_length=512)]


class ExpiresAfter(BaseModel):
    anchor: Literal["created_at"] = "created_at"
    seconds: int


class FileObject(BaseModel):
    id: str
    object: Literal["file"] = "file"
    bytes: int
    created_at: int
    filename: str
    purpose: str
    status: Literal["uploaded", "processed", "error"] = "processed"
    status_details: str | None = None
    expires_at: int | None = None


class FileList(BaseModel):
    object: Literal["list"] = "list"
    data: list[FileObject]
    first_id: str | None = None
    last_id: str | None = None
    has_more: bool = False


class FileDeleted(BaseModel):
    id: str
    object: Literal["file"] = "file"
    deleted: bool = True


class BatchCreate(Strict):
    input_file_id: str = Field(min_length=1, max_length=40)
    endpoint: str = Field(description="/v1/chat/completions or /v1/completions.")
    completion_window: str = Field(
        "24h",
        pattern=r"^[1-9][0-9]*[smh]$",
        description="How long the batch may run: OpenAI's '24h', or shorter (e.g. '30m'); at most 24h.",
    )
    metadata: dict[_MetaKey, _MetaValue] | None = Field(
        None, max_length=16, description="Up to 16 pairs, keys up to 64 characters, values up to 512 (OpenAI's caps)."
    )
    options: RequestOptions | None = Field(
        None, description="vlbatch's own: the visual-token budget, images per request, default max_tokens."
    )
    dry_run: bool = Field(
        False, description="vlbatch's own: store nothing and answer the estimate (lines, time, Wh, cost)."
    )
    output_expires_after: dict[str, Any] | None = Field(
        None,
        description="OpenAI's {'anchor': 'created_at', 'seconds': 3600..2592000}: the output and error files, the "
        "batch's results and the batch itself are deleted that long after the output is written. None: the "
        "tenant's retention (docs/retention.md).",
    )


class BatchError(BaseModel):
    code: str
    message: str
    line: int | None = None
    param: str | None = None


class BatchErrors(BaseModel):
    object: Literal["list"] = "list"
    data: list[BatchError]


class RequestCounts(BaseModel):
    total: int
    completed: int
    failed: int


class BatchUsage(BaseModel):
    input_tokens: int
    output_tokens: int
    total_tokens: int
    input_tokens_details: dict[str, int] = Field(default_factory=lambda: {"cached_tokens": 0})
    output_tokens_details: dict[str, int] = Field(default_factory=lambda: {"reasoning_tokens": 0})


class BatchObject(BaseModel):
    id: str
    object: Literal["batch"] = "batch"
    endpoint: str
    model: str | None = None
    errors: BatchErrors | None = None
    input_file_id: str
    completion_window: str
    status: str
    output_file_id: str | None = None
    error_file_id: str | None = None
    created_at: int
    in_progress_at: int | None = None
    expires_at: int | None = None
    finalizing_at: int | None = None
    completed_at: int | None = None
    failed_at: int | None = None
    expired_at: int | None = None
    cancelling_at: int | None = None
    cancelled_at: int | None = None
    request_counts: RequestCounts
    usage: BatchUsage | None = None
    metadata: dict[str, Any] | None = None
    output_expires_after: ExpiresAfter | None = None
    output_expires_at: int | None = Field(
        None,
        description="vlbatch's own: when the batch, its results and its files are deleted; None while it runs, or "
        "when they are kept for ever.",
    )


class BatchList(BaseModel):
    object: Literal["list"] = "list"
    data: list[BatchObject]
    first_id: str | None = None
    last_id: str | None = None
    has_more: bool = False

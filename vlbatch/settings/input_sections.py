"""The input sections: where jobs read from, URL fetching, size caps, uploads, decoding and XMP sidecars."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, IPvAnyNetwork, field_validator
from pydantic_settings import NoDecode

from vlbatch.settings.section import Section, split_commas


class Inputs(Section):
    """Where jobs may read from and write to."""

    allowed_input_roots: Annotated[list[Path], NoDecode] = Field(
        default_factory=list,
        description="Server-side directories jobs may read from (comma separated in the environment).",
    )
    allowed_s3_prefixes: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Object storage jobs may read from, as s3://bucket/prefix (comma separated): the input roots of "
        "s3:// folders and items. Credentials and endpoint come from boto3's own AWS_* environment.",
    )
    tenant_roots_required: bool = Field(
        False,
        description="A tenant with no roots of its own (`vlbatch keys roots`) may read and write nothing, instead of "
        "everything under VLBATCH_ALLOWED_INPUT_ROOTS. Set it where tenants must not see each other's files.",
    )

    @field_validator("allowed_input_roots", mode="before")
    @classmethod
    def _split_roots(cls, value: object) -> object:
        if isinstance(value, str):
            return [Path(p.strip()) for p in value.split(",") if p.strip()]
        return value

    @field_validator("allowed_s3_prefixes", mode="before")
    @classmethod
    def _split_s3_prefixes(cls, value: object) -> object:
        value = split_commas(value)
        if isinstance(value, list):
            bad = [
                p for p in value if not (isinstance(p, str) and re.fullmatch(r"s3://[a-z0-9][a-z0-9.-]{1,62}(/.*)?", p))
            ]
            if bad:
                raise ValueError(f"allowed_s3_prefixes {bad} must read s3://bucket or s3://bucket/prefix")
        return value


class Fetch(Section):
    """Fetching image URLs."""

    url_timeout_s: float = Field(
        10.0, gt=0, description="Deadline for fetching an image URL in all (lookups, redirects and the body)."
    )
    url_allow_networks: Annotated[list[IPvAnyNetwork], NoDecode] = Field(
        default_factory=list,
        description="Networks image URLs may reach although they are not public (comma separated CIDRs), e.g. "
        "10.20.0.0/16; loopback, private, link-local and reserved addresses are refused otherwise.",
    )
    url_allow_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Host names whose image URLs may reach whatever address they resolve to (comma separated).",
    )
    url_max_redirects: int = Field(5, ge=0, le=20, description="Redirects an image URL may take, each checked.")

    @field_validator("url_allow_networks", "url_allow_hosts", mode="before")
    @classmethod
    def _split_commas(cls, value: object) -> object:
        return split_commas(value)


class Limits(Section):
    """Size caps of a job, a request's items and one input."""

    max_items_per_job: int = Field(5_000_000, ge=1, description="Largest job accepted.")
    max_items_per_request: int = Field(
        100_000, ge=1, description="Most items one request may list inline (a folder job is bounded per job only)."
    )
    max_images_per_item: int = Field(256, ge=1, description="Most images (or clips) one inline item may list.")
    max_item_line_bytes: int = Field(
        1024 * 1024,
        ge=1024,
        description="Longest item line of an NDJSON job upload (POST /v1/jobs/ndjson); a longer line refuses the job "
        "(item_line_too_long), nothing stored. The upload as a whole is bounded by its item count, not by "
        "VLBATCH_MAX_REQUEST_BYTES.",
    )
    max_source_chars: int = Field(
        4096,
        ge=64,
        description="Longest image source (path or URL) of an inline item; data URLs are bounded by the request body "
        "cap instead.",
    )
    max_input_bytes: int = Field(50 * 1024 * 1024, ge=1, description="Size cap for one input file.")
    max_video_bytes: int = Field(2 * 1024**3, ge=1, description="Size cap for one video file (read from disk).")
    max_video_seconds: float = Field(3 * 3600.0, gt=0, description="Longest video an item may hold.")
    max_video_pixels: int = Field(8192 * 4320, ge=1, description="Largest video frame (width x height) decoded.")


class Uploads(Section):
    """Uploaded files (/v1/files) and batch input files, and where the API keeps them."""

    data_dir: Path = Field(
        Path("./vlbatch-data"), description="Where the API keeps uploaded and produced files (under files/)."
    )
    max_upload_bytes: int = Field(
        200 * 1024 * 1024, ge=1, description="Size cap for one uploaded file (/v1/files); streamed to disk."
    )
    max_batch_line_bytes: int = Field(
        1024 * 1024,
        ge=1024,
        description="Longest line of a batch input file; a longer line fails alone (batch_line_too_long), unread.",
    )
    max_batch_lines: int = Field(
        50_000, ge=1, description="Request lines one batch input file may hold (OpenAI's cap is 50,000)."
    )


class Decoding(Section):
    """Decoding and parsing inputs: threads, child processes and their caps (preprocessing)."""

    preprocess_threads: int = Field(4, ge=1, le=64, description="Threads decoding and resizing images.")
    preprocess_nice: int = Field(
        10,
        ge=0,
        le=19,
        description="Niceness the preprocessing threads add to the worker's (Linux): decoding yields the CPU to "
        "the engine and its frontend; 0 keeps them at the worker's priority.",
    )
    image_decode_isolation: Literal["thread", "process"] = Field(
        "thread",
        description="Where images are decoded: 'thread' in the worker's preprocessing threads; 'process' in child "
        "processes with a memory cap and a deadline, so a decoder that crashes, hangs or balloons on a hostile file "
        "fails that item (decode_crashed, decode_timeout, decode_memory) and the worker and its engine go on.",
    )
    image_decode_timeout_s: float = Field(
        30.0, gt=0, description="Wall time one image's decode may take in its child process (isolation 'process')."
    )
    image_decode_memory_mb: int = Field(
        1024, ge=256, description="Address-space cap (RLIMIT_AS) of an image decoder child process, in MiB."
    )
    image_decode_processes: int = Field(
        2, ge=1, le=64, description="Image decoder child processes per worker (isolation 'process')."
    )
    video_decode_timeout_s: float = Field(
        120.0, gt=0, description="Time cap for choosing and decoding a video's frames."
    )
    document_parse_timeout_s: float = Field(
        120.0, gt=0, description="Wall time one document's parse (or one page's render) may take in its child process."
    )
    document_parse_memory_mb: int = Field(
        2048, ge=256, description="Address-space cap (RLIMIT_AS) of a document parser child process, in MiB."
    )
    document_parse_processes: int = Field(
        2, ge=1, le=64, description="Document parser child processes per worker (each reused for many documents)."
    )


class Xmp(Section):
    """XMP sidecars."""

    xmp_keyword_root: str = Field(
        "AI",
        pattern=r"[^|/\s]",
        max_length=200,
        description="The parent of machine-made keywords in XMP sidecars (`AI|<tag>` in lr:hierarchicalSubject, "
        "`AI/<tag>` in digiKam:TagsList), so a photo manager can filter them; `|` or `/` nest levels (`AI/vlbatch`). "
        "`vlbatch eval --labels-from xmp` leaves keywords under it out of the library's own.",
    )

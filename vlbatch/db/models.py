"""Table models (SQLAlchemy 2.0). Request/response models live in ``api.schemas``."""

from __future__ import annotations

import enum
from datetime import UTC, datetime
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


def utcnow() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    type_annotation_map: ClassVar[dict[Any, Any]] = {dict[str, Any]: JSON, list[Any]: JSON}


class JobStatus(enum.StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    PAUSED = "paused"  # no new chunk is claimed; what workers hold finishes
    FINISHED = "finished"
    CANCELLED = "cancelled"


class ItemStatus(enum.StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    EXPIRED = "expired"


TERMINAL_ITEM_STATES = frozenset({ItemStatus.SUCCEEDED, ItemStatus.FAILED, ItemStatus.CANCELLED, ItemStatus.EXPIRED})

# The tenant of rows made without an API key: the embedded runner, the CLI, and an API run with VLBATCH_AUTH=off.
DEFAULT_TENANT = "default"


# The jobs a queue claims from (queued or running), spelled once: a partial index serves a query only when the
# query names its predicate with the same literals (SQLite matches the term, PostgreSQL must prove it).
ACTIVE_JOBS_SQL = "status IN ('queued', 'running')"


class Job(Base):
    __tablename__ = "jobs"
    # An Idempotency-Key is the tenant's own: two tenants may use the same key for different jobs.
    __table_args__ = (
        UniqueConstraint("tenant", "idempotency_key", name="uq_jobs_tenant_idempotency_key"),
        Index("ix_jobs_status_finished_at", "status", "finished_at"),  # the janitor's ended jobs
        # A claim's reads (``claim_order``): the tenants with work on a queue, and each one's jobs in deadline
        # order. Only active jobs are indexed, so finished ones (most rows) cost a claim nothing. No index orders a
        # queue's jobs across tenants: a planner without statistics would walk it to find one tenant's.
        Index(
            "ix_jobs_active_tenant_order",
            "model",
            "priority",
            "tenant",
            "deadline",
            "created_at",
            "id",
            postgresql_where=text(ACTIVE_JOBS_SQL),
            sqlite_where=text(ACTIVE_JOBS_SQL),
        ),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(128), default=DEFAULT_TENANT, index=True)
    pipeline: Mapped[str] = mapped_column(String(64))
    model: Mapped[str] = mapped_column(String(256))
    priority: Mapped[str] = mapped_column(String(16), default="batch")
    status: Mapped[str] = mapped_column(String(16), default=JobStatus.QUEUED)
    options: Mapped[dict[str, Any]] = mapped_column(default=dict)
    options_hash: Mapped[str] = mapped_column(String(64))
    idempotency_key: Mapped[str | None] = mapped_column(String(200))
    # sha256 of the route and body that came with the key; a replay with another request is refused (409).
    idempotency_hash: Mapped[str | None] = mapped_column(String(64))
    total: Mapped[int] = mapped_column(Integer, default=0)
    output_dir: Mapped[str | None] = mapped_column(String(1024))  # document jobs: a JSON file per document
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # Booked by the engine workers (worker.energy); NULL while no interval of the job had a known power.
    energy_wh: Mapped[float | None] = mapped_column(Float)
    energy_unmetered_tokens: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    # Write positions handed out to the job's finished items (``Item.written_seq``); results page by them.
    results_written: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    # Claims within the job's queue go earliest deadline first; NULL: after every job with one, by fair share.
    deadline: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # When the janitor may delete the job with its items and results (a batch's ``output_expires_after``); NULL:
    # its tenant's job retention from ``finished_at`` (``vlbatch.db.retention``).
    expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class Chunk(Base):
    """A unit of queued work. Task messages carry only a chunk id."""

    __tablename__ = "chunks"
    __table_args__ = (
        Index("ix_chunks_job_done_seq", "job_id", "done", "seq"),
        Index("ix_chunks_job_claimed_at", "job_id", "claimed_at"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    seq: Mapped[int] = mapped_column(Integer)
    lease_owner: Mapped[str | None] = mapped_column(String(128))
    lease_expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    enqueued_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # Messages sent since the last claim: the reconciler waits longer before each re-send, so chunks for a
    # model no worker serves are not sent every pass (and are reported as waiting for a worker).
    sends: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    done: Mapped[bool] = mapped_column(default=False)
    # When a worker last leased it (fair shares count claims in ``claim_tables``).
    claimed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class Item(Base):
    __tablename__ = "items"
    __table_args__ = (
        Index("ix_items_job_status", "job_id", "status"),
        Index("ix_items_job_written_seq", "job_id", "written_seq"),
        Index("ix_items_job_seq", "job_id", "seq"),  # exports stream a job's items in seq order, unsorted
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    chunk_id: Mapped[int] = mapped_column(ForeignKey("chunks.id", ondelete="CASCADE"), index=True)
    seq: Mapped[int] = mapped_column(Integer)
    ref: Mapped[str | None] = mapped_column(String(512))
    inputs: Mapped[dict[str, Any]] = mapped_column(default=dict)
    status: Mapped[str] = mapped_column(String(16), default=ItemStatus.QUEUED)
    error_code: Mapped[str | None] = mapped_column(String(64))
    error_message: Mapped[str | None] = mapped_column(Text)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    crash_count: Mapped[int] = mapped_column(Integer, default=0)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    # The item's position among its job's finished items, in commit order (``outcomes.take_positions``); None while
    # it is not succeeded or failed. Results page by it, so an item finishing out of seq order is never skipped.
    written_seq: Mapped[int | None] = mapped_column(BigInteger)


class Result(Base):
    """At most one row per item (upserted on item_id), with the processed-with marker."""

    __tablename__ = "results"
    # A duplicate's lookup (``vlbatch.db.reuse``): the same bytes, then the marker and the tenant.
    __table_args__ = (Index("ix_results_content_hash", "content_hash"),)

    item_id: Mapped[int] = mapped_column(ForeignKey("items.id", ondelete="CASCADE"), primary_key=True)
    job_id: Mapped[str] = mapped_column(String(32), index=True)
    output: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    raw_text: Mapped[str | None] = mapped_column(Text)
    prompt_tokens: Mapped[int] = mapped_column(Integer, default=0)
    completion_tokens: Mapped[int] = mapped_column(Integer, default=0)
    model: Mapped[str] = mapped_column(String(256))
    model_revision: Mapped[str | None] = mapped_column(String(128))
    pipeline_version: Mapped[str] = mapped_column(String(32))
    options_hash: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    # The item's tags as exports show them: the model's (``output``'s) merged with the operator's edits
    # (``TagEdit``), each ``{"tag", "source", "by", "at"}`` (``vlbatch.db.tags``). Rewritten with every result
    # and every edit; NULL for a result written before tags had sources (readers then take ``output``'s tags).
    tags: Mapped[list[Any] | None] = mapped_column(JSON(none_as_null=True))
    # sha256 of the item's image bytes (``worker.reuse.content_hash``); NULL for other kinds of item and for
    # results written before it was kept.
    content_hash: Mapped[str | None] = mapped_column(String(64))
    # The item whose engine answer this result is: a duplicate of the same bytes, processed with the same marker
    # by the same tenant, that the engine was not asked again for. NULL for an answer of its own.
    reused_from: Mapped[int | None] = mapped_column(Integer)
    # sha256 of the prompt text the engine answered (``worker.rounds.prompt_hash``); NULL for a document, a
    # failure before the engine was asked, and results written before it was kept.
    prompt_hash: Mapped[str | None] = mapped_column(String(64))


class TagSource(enum.StrEnum):
    MODEL = "model"
    MANUAL = "manual"


class TagEdit(Base):
    """An operator's tag on an item: added (kept whatever the model says) or removed (dropped from the model's
    tags). One row per item and tag, the latest edit; re-runs carry them to the new job's items, and every
    result written for the item is merged with them, so a re-run never undoes a person's work."""

    __tablename__ = "tag_edits"
    __table_args__ = (UniqueConstraint("item_id", "tag", name="uq_tag_edits_item_tag"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    item_id: Mapped[int] = mapped_column(ForeignKey("items.id", ondelete="CASCADE"), index=True)
    tag: Mapped[str] = mapped_column(String(200))
    added: Mapped[bool] = mapped_column()  # False: a removal
    author: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class PausedQueue(Base):
    """A paused queue (a model and priority, ``jobs.publisher.queue_name``): no chunk of any job on it is claimed
    until it is resumed; chunks workers already hold finish. Every tenant's jobs on the queue wait."""

    __tablename__ = "paused_queues"

    model: Mapped[str] = mapped_column(String(256), primary_key=True)
    priority: Mapped[str] = mapped_column(String(16), primary_key=True)
    paused_by: Mapped[str] = mapped_column(String(200))
    paused_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class EngineState(Base):
    """A worker's engine as its breaker sees it: ``broken`` while the breaker is open (the canary failed, or the
    engine crashed on several items in a row, or the restart budget is spent), ``ok`` once a canary passed. The
    API reads it for /readyz, a job's ``stalled`` and the metrics; a worker removes its row when it stops."""

    __tablename__ = "engine_states"

    owner: Mapped[str] = mapped_column(String(200), primary_key=True)  # the worker's lease owner name
    model: Mapped[str] = mapped_column(String(256), index=True)
    state: Mapped[str] = mapped_column(String(16))  # "ok" or "broken"
    reason: Mapped[str | None] = mapped_column(Text)
    since: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)  # broken since, or ok since
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class DeviceSample(Base):
    """One chip reading (temperature, power, memory) a worker took while it ran a job's chunk."""

    __tablename__ = "device_telemetry"
    __table_args__ = (Index("ix_device_telemetry_job_sampled", "job_id", "sampled_at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    chunk_id: Mapped[int | None] = mapped_column(Integer)
    worker: Mapped[str] = mapped_column(String(128))
    device_id: Mapped[int] = mapped_column(Integer)  # logical id (npu-smi's Device column)
    npu_id: Mapped[int | None] = mapped_column(Integer)
    temp_c: Mapped[float | None] = mapped_column(Float)
    power_w: Mapped[float | None] = mapped_column(Float)  # 310P: the card's power, shared by its two chips
    memory_used_mb: Mapped[int | None] = mapped_column(Integer)
    memory_total_mb: Mapped[int | None] = mapped_column(Integer)
    aicore_pct: Mapped[float | None] = mapped_column(Float)
    sampled_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, index=True)


class DocumentPart(Base):
    """An intermediate answer of a document item: one OCR page, one map chunk, or one reduce group.

    Stored as it is produced (upserted on item, stage and index), so a redelivered document reuses what
    is done and the reduce step starts from what the DB holds.
    """

    __tablename__ = "document_parts"
    __table_args__ = (UniqueConstraint("item_id", "stage", "idx", name="uq_document_parts_item_stage_idx"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    item_id: Mapped[int] = mapped_column(ForeignKey("items.id", ondelete="CASCADE"), index=True)
    stage: Mapped[str] = mapped_column(String(16))  # ocr, map, reduce1, reduce2, ...
    idx: Mapped[int] = mapped_column(Integer)  # page number for ocr, chunk or group index otherwise
    pages: Mapped[list[Any]] = mapped_column(default=list)
    input_tokens: Mapped[int] = mapped_column(Integer, default=0)  # the chunk's own text, tokenizer-counted
    output: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    prompt_tokens: Mapped[int] = mapped_column(Integer, default=0)
    completion_tokens: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class JobTemplate(Base):
    """A recurring document job: an inbox folder, a pipeline with options, a cron schedule, an output folder."""

    __tablename__ = "job_templates"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    tenant: Mapped[str] = mapped_column(String(128), default=DEFAULT_TENANT)  # the tenant of the jobs it makes
    inbox: Mapped[str] = mapped_column(String(1024))
    pipeline: Mapped[str] = mapped_column(String(64))
    model: Mapped[str] = mapped_column(String(256))
    options: Mapped[dict[str, Any]] = mapped_column(default=dict)
    cron: Mapped[str] = mapped_column(String(128))  # five fields: minute hour day-of-month month day-of-week
    output_dir: Mapped[str | None] = mapped_column(String(1024))
    enabled: Mapped[bool] = mapped_column(default=True)
    last_run_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class ApiKey(Base):
    """An API key: only a SHA-256 of its secret is stored (the secret is 32 random bytes, so no salt or slow hash
    is needed); ``prefix`` is the key's first characters, shown by ``vlbatch keys list`` to tell keys apart."""

    __tablename__ = "api_keys"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    tenant: Mapped[str] = mapped_column(String(128), index=True)
    name: Mapped[str | None] = mapped_column(String(128))
    is_admin: Mapped[bool] = mapped_column(default=False)
    prefix: Mapped[str] = mapped_column(String(16))
    secret_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class DashboardSession(Base):
    """A dashboard login: the cookie holds a random session id (only its SHA-256 is stored), never the API key.
    Logout deletes the row; a revoked key ends its sessions (``vlbatch.db.dashboard_sessions``)."""

    __tablename__ = "dashboard_sessions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    secret_hash: Mapped[str] = mapped_column(String(64), unique=True)
    key_id: Mapped[int] = mapped_column(ForeignKey("api_keys.id", ondelete="CASCADE"), index=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class ReadinessProbe(Base):
    """The row ``/readyz`` rewrites to prove that a write reaches the disk (``vlbatch.db.readiness``)."""

    __tablename__ = "readiness_probes"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    probes: Mapped[int] = mapped_column(BigInteger, default=0)
    probed_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class TenantRoots(Base):
    """The folders a tenant's jobs may read (``input_roots``) and write document files into (``output_roots``;
    None: its input roots), and the ``s3://`` prefixes they may read (``s3_prefixes``; None: the default), set by an
    admin with ``vlbatch keys roots``. A tenant without a row reads and writes under the global
    ``VLBATCH_ALLOWED_INPUT_ROOTS`` and ``VLBATCH_ALLOWED_S3_PREFIXES``, which also bound every tenant's own
    (``vlbatch.db.tenants``)."""

    __tablename__ = "tenant_roots"

    tenant: Mapped[str] = mapped_column(String(128), primary_key=True)
    input_roots: Mapped[list[Any]] = mapped_column(JSON)
    output_roots: Mapped[list[Any] | None] = mapped_column(JSON(none_as_null=True))
    s3_prefixes: Mapped[list[Any] | None] = mapped_column(JSON(none_as_null=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class InboxFile(Base):
    """The content hash of each inbox file a template has queued, so a later run takes only new or changed files."""

    __tablename__ = "inbox_files"
    __table_args__ = (UniqueConstraint("template_id", "path", name="uq_inbox_files_template_path"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    template_id: Mapped[int] = mapped_column(ForeignKey("job_templates.id", ondelete="CASCADE"), index=True)
    path: Mapped[str] = mapped_column(String(1024))
    content_hash: Mapped[str] = mapped_column(String(64))
    job_id: Mapped[str | None] = mapped_column(String(32))
    seen_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class EngineSample(Base):
    """A worker's engine over one interval: occupancy (running requests per engine step) and the
    feeder's cumulative counters, so a reader can chart throughput and occupancy over time."""

    __tablename__ = "engine_samples"
    __table_args__ = (
        Index("ix_engine_samples_worker_at", "worker", "sampled_at"),
        Index("ix_engine_samples_model_at", "model", "sampled_at"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    worker: Mapped[str] = mapped_column(String(128))
    model: Mapped[str | None] = mapped_column(String(256))  # the served model: its heartbeat, and dry runs' rate
    sampled_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    steps: Mapped[int] = mapped_column(Integer, default=0)  # cumulative engine steps
    running_sum: Mapped[int] = mapped_column(Integer, default=0)  # cumulative running requests over steps
    capacity: Mapped[int] = mapped_column(Integer, default=0)  # max_num_seqs
    mean_running: Mapped[float | None] = mapped_column(Float)  # over the interval ending here
    backlog: Mapped[int] = mapped_column(Integer, default=0)  # prepared, waiting outside the engine
    items_done: Mapped[int] = mapped_column(Integer, default=0)  # cumulative
    output_tokens: Mapped[int] = mapped_column(Integer, default=0)  # cumulative
    prep_images: Mapped[int] = mapped_column(Integer, default=0)  # cumulative
    prep_seconds: Mapped[float] = mapped_column(Float, default=0.0)  # cumulative
    db_items: Mapped[int] = mapped_column(Integer, default=0)  # cumulative
    db_seconds: Mapped[float] = mapped_column(Float, default=0.0)  # cumulative
    # The same spans' CPU on their threads' clocks, cumulative (0 in rows stored before it was kept).
    db_cpu_seconds: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    # The worker's claims, apart from its writes (``db_*``: result writes and chunk finishes only), cumulative: their
    # count, wall and CPU seconds (0 in rows stored before they were kept apart, whose db_* counted claims too).
    claims: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    claim_seconds: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    claim_cpu_seconds: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")


class BatchStatus(enum.StrEnum):
    VALIDATING = "validating"
    IN_PROGRESS = "in_progress"
    FINALIZING = "finalizing"
    COMPLETED = "completed"
    FAILED = "failed"
    EXPIRED = "expired"
    CANCELLING = "cancelling"
    CANCELLED = "cancelled"


class StoredFile(Base):
    """A file of the OpenAI-compatible Files API: uploaded (purpose ``batch``) or produced by a batch."""

    __tablename__ = "files"
    __table_args__ = (Index("ix_files_created_at", "created_at"),)

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(128), default=DEFAULT_TENANT, index=True)
    filename: Mapped[str] = mapped_column(String(512))
    purpose: Mapped[str] = mapped_column(String(32))  # batch, batch_output
    bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    stored_as: Mapped[str] = mapped_column(String(128))  # name under the file store's directory
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    # From the upload's ``expires_after`` (or a batch's ``output_expires_after``); NULL: its tenant's file retention
    # from ``created_at`` (``vlbatch.db.retention``).
    expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class Batch(Base):
    """An OpenAI-compatible batch: an input file run as one job of a request pipeline (``job_id``).

    Each status change has its timestamp; the output and error files are written when it finalizes.
    """

    __tablename__ = "batches"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(128), default=DEFAULT_TENANT, index=True)
    endpoint: Mapped[str] = mapped_column(String(64))
    input_file_id: Mapped[str] = mapped_column(String(40))
    completion_window: Mapped[str] = mapped_column(String(8), default="24h")
    status: Mapped[str] = mapped_column(String(16), default=BatchStatus.VALIDATING)
    job_id: Mapped[str | None] = mapped_column(ForeignKey("jobs.id", ondelete="SET NULL"), index=True)
    model: Mapped[str | None] = mapped_column(String(256))
    meta: Mapped[dict[str, Any] | None] = mapped_column("metadata", JSON)
    errors: Mapped[list[Any]] = mapped_column(default=list)  # {code, message, line, param}, the first 100
    invalid_lines: Mapped[int] = mapped_column(Integer, default=0)
    output_file_id: Mapped[str | None] = mapped_column(String(40))
    error_file_id: Mapped[str | None] = mapped_column(String(40))
    prompt_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    completion_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    in_progress_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    finalizing_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    completed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    failed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    expired_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    cancelling_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    cancelled_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # OpenAI's ``output_expires_after`` (seconds, anchored at the output files' creation); NULL: the tenant's default.
    output_expires_after_s: Mapped[int | None] = mapped_column(Integer)

"""The one typed settings object. Environment variables use the prefix ``VLBATCH_``; ``.env`` is read."""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal, get_args

from pydantic import AliasChoices, BaseModel, Field, IPvAnyNetwork, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

QueueKind = Literal["interactive", "batch", "documents"]


class TenantQuota(BaseModel):
    """One tenant's quotas; a field left unset falls back to the ``tenant_max_*`` setting."""

    max_items_per_job: int | None = Field(None, ge=1)
    max_active_jobs: int | None = Field(None, ge=1)
    max_upload_bytes: int | None = Field(None, ge=1)
    max_upload_total_bytes: int | None = Field(None, ge=1)
    max_upload_files: int | None = Field(None, ge=1)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="VLBATCH_", env_file=".env", env_nested_delimiter="__", extra="ignore")

    database_url: str = Field(
        "sqlite:///./vlbatch.db",
        description="SQLAlchemy URL; PostgreSQL as postgresql+psycopg://user@host/db.",
    )
    broker_url: str = Field("redis://127.0.0.1:6379/0", description="Celery broker (Redis).")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] | None = Field(
        None,
        description="Log level. A command (`vlbatch tag`, `demo`, ...) then logs on the terminal instead of into its "
        "log file, as with `-v`; the services (`api`, `worker`) log at it on stderr (INFO when unset).",
    )
    log_format: Literal["text", "json"] = Field(
        "text", description="The services' log lines on stderr: `time level logger message`, or one JSON object each."
    )
    log_file: Path | None = Field(
        None,
        description="A command's log file; unset: vlbatch-<command>.log in the work directory (demo: its --workdir).",
    )
    model_path: str | None = Field(None, description="Model directory served by this worker.")
    model_name: str | None = Field(None, description="Served model name; defaults to the directory name.")
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
    model_not_served: Literal["warn", "refuse"] = Field(
        "warn",
        description="A new job for a model no live worker serves, while other workers are live (their engine samples "
        "of the last few VLBATCH_ENGINE_SAMPLE_INTERVAL_S): warn (the job is made and its answer's `warnings` says so) "
        "or refuse it (409 model_not_served). With no live worker at all nothing is said: workers may be starting.",
    )
    chunk_size: int = Field(32, ge=1, le=10_000, description="Items per chunk (one task message).")
    document_chunk_size: int = Field(
        2, ge=1, le=100, description="Documents per chunk (one task message); they run side by side in a worker."
    )
    lease_seconds: int = Field(
        120,
        ge=5,
        description="How long a claimed chunk stays owned without renewal; a worker renews its leases every "
        "quarter of this while it holds the chunk, so this is how soon a dead worker's chunks are taken over.",
    )
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
    max_input_bytes: int = Field(50 * 1024 * 1024, ge=1, description="Size cap for one input file.")
    max_video_bytes: int = Field(2 * 1024**3, ge=1, description="Size cap for one video file (read from disk).")
    max_video_seconds: float = Field(3 * 3600.0, gt=0, description="Longest video an item may hold.")
    max_video_pixels: int = Field(8192 * 4320, ge=1, description="Largest video frame (width x height) decoded.")
    video_decode_timeout_s: float = Field(
        120.0, gt=0, description="Time cap for choosing and decoding a video's frames."
    )
    engine: dict[str, object] = Field(
        default_factory=dict,
        description="Engine arguments (see engine.runtime.config.EngineConfig), "
        'e.g. VLBATCH_ENGINE=\'{"dtype": "float16"}\'.',
    )
    preprocess_threads: int = Field(4, ge=1, le=64, description="Threads decoding and resizing images.")
    preprocess_nice: int = Field(
        10,
        ge=0,
        le=19,
        description="Niceness the preprocessing threads add to the worker's (Linux): decoding yields the CPU to "
        "the engine and its frontend; 0 keeps them at the worker's priority.",
    )
    worker_queues: Annotated[list[QueueKind], NoDecode] = Field(
        default_factory=lambda: list(get_args(QueueKind)),
        description="Which of this model's queues a worker takes (comma separated), e.g. documents.",
    )
    worker_concurrency: int = Field(
        2,
        ge=1,
        le=8,
        description="Celery task threads per engine worker. A task only leases its chunk into the feeder (which "
        "holds as many chunks as keep the engine full), so 2 is enough.",
    )
    drain_timeout_s: float = Field(
        60.0, ge=0, description="On SIGTERM: how long held chunks may finish before the rest is handed back."
    )
    engine_sample_interval_s: float = Field(
        10.0, gt=0, le=3600, description="How often a worker stores its engine occupancy and feeder counters."
    )
    reconcile_interval_s: float = Field(
        30.0, gt=0, description="How often workers (and the API, see api_reconcile) look for lost chunks."
    )
    unclaimed_resend_s: float = Field(
        60.0,
        gt=0,
        description="A chunk sent and not claimed within this is sent again (its message may be lost), then after "
        "twice this, and so on up to 32 times: chunks for a model no worker serves are not re-sent every pass.",
    )
    api_reconcile: bool = Field(
        True, description="The API process runs the reconciler too: chunks whose send failed go out with no worker up."
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
    document_parse_timeout_s: float = Field(
        120.0, gt=0, description="Wall time one document's parse (or one page's render) may take in its child process."
    )
    document_parse_memory_mb: int = Field(
        2048, ge=256, description="Address-space cap (RLIMIT_AS) of a document parser child process, in MiB."
    )
    document_parse_processes: int = Field(
        2, ge=1, le=64, description="Document parser child processes per worker (each reused for many documents)."
    )
    max_items_per_job: int = Field(5_000_000, ge=1, description="Largest job accepted.")
    max_items_per_request: int = Field(
        100_000, ge=1, description="Most items one request may list inline (a folder job is bounded per job only)."
    )
    max_images_per_item: int = Field(256, ge=1, description="Most images (or clips) one inline item may list.")
    max_source_chars: int = Field(
        4096,
        ge=64,
        description="Longest image source (path or URL) of an inline item; data URLs are bounded by the request body "
        "cap instead.",
    )
    data_dir: Path = Field(
        Path("./vlbatch-data"), description="Where the API keeps uploaded and produced files (under files/)."
    )
    max_request_bytes: int = Field(
        16 * 1024 * 1024,
        ge=1024,
        description="Largest request body the API reads (Content-Length or chunked; 413 past it). /v1/files has "
        "its own cap.",
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
    # The client side (`vlbatch jobs`): where the API is and the key to show it.
    api_url: str = Field("http://127.0.0.1:8000", description="The API `vlbatch jobs` talks to.")
    api_key: SecretStr | None = Field(None, description="The API key `vlbatch jobs` sends (Authorization: Bearer).")
    # Access (api.deps, jobs.quotas): API keys, tenants and the quotas each tenant gets.
    auth: Literal["on", "off"] = Field(
        "on",
        description="API key authentication (keys from `vlbatch keys create`). 'off' only for an embedded or "
        "dev API on a trusted host: every request then acts as the admin of tenant 'default'.",
    )
    auth_open_docs: bool = Field(False, description="Serve /docs and /openapi.json without a key.")
    auth_open_metrics: bool = Field(
        False, description="Serve /metrics without a key (a scraper on a trusted network); else it takes an admin key."
    )
    dashboard_session_hours: float = Field(
        8.0, gt=0, le=24 * 30, description="How long a dashboard login lasts (the session, kept server-side)."
    )
    max_manual_tags: int = Field(
        64, ge=1, le=10_000, description="Tags one result may have added or removed by hand (409 past it)."
    )
    thumbnail_processes: int = Field(
        2, ge=1, le=16, description="Thumbnails the API decodes at once, each in a decoder child process."
    )
    thumbnail_wait_s: float = Field(
        30.0, gt=0, le=300, description="Longest a thumbnail request waits for a free decoder (then 503)."
    )
    readyz_timeout_s: float = Field(
        2.0, gt=0, le=60, description="Longest /readyz waits for its test write (a held lock counts as not ready)."
    )
    tenant_max_items_per_job: int | None = Field(
        None, ge=1, description="Items one job of a tenant may hold (413 above it); unset: VLBATCH_MAX_ITEMS_PER_JOB."
    )
    tenant_max_active_jobs: int | None = Field(
        100, ge=1, description="Unfinished (queued or running) jobs a tenant may have at once (429 above it)."
    )
    tenant_max_upload_bytes: int | None = Field(
        None, ge=1, description="Bytes one upload of a tenant may hold (413 above it); unset: VLBATCH_MAX_UPLOAD_BYTES."
    )
    tenant_quotas: dict[str, TenantQuota] = Field(
        default_factory=dict,
        description="Per-tenant overrides of the tenant_max_* quotas, e.g. "
        '\'{"acme": {"max_active_jobs": 20, "max_items_per_job": 100000}}\'.',
    )
    tenant_shares: dict[str, float] = Field(
        default_factory=dict,
        description="Each tenant's weight in a queue's fair shares (default 1), e.g. '{\"acme\": 2}': a tenant "
        "of weight 2 gets two claims for every one of a weight-1 tenant while both have work in the queue.",
    )
    fair_share_window_s: float = Field(
        600.0,
        gt=0,
        description="How far back a queue's fair shares count each job's and tenant's claims: work done longer "
        "ago gives no head start.",
    )
    # Dry runs: the work one estimate may do in the API, and how many a tenant runs at once.
    dry_run_max_files: int = Field(
        1000,
        ge=1,
        description="Images one dry run reads the header of (the first ones); the others are counted at the mean "
        "of those read, and the estimate says so.",
    )
    dry_run_max_seconds: float = Field(
        5.0,
        gt=0,
        le=600,
        description="Longest one dry run spends reading image headers; the images not read by then are counted at "
        "the mean of those read, and the estimate says so.",
    )
    dry_run_header_bytes: int = Field(
        1024 * 1024,
        ge=4096,
        le=64 * 1024 * 1024,
        description="Most bytes of one image a dry run reads for its size (a JPEG's size follows its metadata); "
        "an image whose header is longer counts as unknown.",
    )
    dry_run_concurrency: int = Field(
        2,
        ge=1,
        le=64,
        description="Dry runs one tenant may have running at once in one API process (429 dry_run_busy beyond).",
    )
    # Limits of the HTTP server, of what a tenant's uploads may hold, and of an embedded engine on a CPU host
    # (cli.serve, jobs.quotas, cli.embedded_runs).
    http_max_header_bytes: int = Field(
        32 * 1024,
        ge=1024,
        le=1024 * 1024,
        description="Largest request head (request line and every header) the API server reads; past it the "
        "connection gets 400 and is closed before the request reaches the API.",
    )
    http_max_headers: int = Field(
        100, ge=10, le=10_000, description="Most header fields one request may carry (431 above it)."
    )
    trusted_proxies: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["127.0.0.1"],
        description="Addresses or CIDRs (comma separated, * for any) whose X-Forwarded-Proto and X-Forwarded-For "
        "the API believes: set it to the TLS proxy's (an Ingress controller's pod network) so the dashboard's "
        "cookie is marked Secure behind it.",
    )
    tenant_max_upload_total_bytes: int | None = Field(
        20 * 1024**3,
        ge=1,
        description="Bytes a tenant's uploaded files (/v1/files) may hold together (413 above it; delete some).",
    )
    tenant_max_upload_files: int | None = Field(
        1000, ge=1, description="Uploaded files (/v1/files) a tenant may hold at once (413 above it; delete some)."
    )
    cpu_kv_cache_share: float = Field(
        0.25,
        gt=0,
        le=0.9,
        description="On a CPU host, the largest share of available memory (MemAvailable) the KV cache of an engine "
        "(worker, tag, docs, run-batch, eval) takes when neither --engine nor VLBATCH_ENGINE sizes it; less when the "
        "model's max_num_seqs full-length sequences need less. An unset max_model_len is lowered to what it holds.",
    )
    # Devices and their environment. The vendor variables are read here, and only here.
    visible_devices: Annotated[list[int] | None, NoDecode] = Field(
        None,
        validation_alias=AliasChoices("VLBATCH_VISIBLE_DEVICES", "ASCEND_RT_VISIBLE_DEVICES"),
        description="Logical device ids this process may use (npu-smi's Device column), e.g. 0,1,4,5.",
    )
    instances: dict[str, list[int]] = Field(
        default_factory=dict,
        description='Engine instances on this host and the device ids each owns, e.g. \'{"a": [0, 1], "b": [4, 5]}\'.',
    )
    npu_smi: str = Field("npu-smi", description="The npu-smi binary (name on PATH or a path).")
    platform: str | None = Field(
        None,
        description="Device platform (engine.platforms): ascend-310p, ascend-910b, cuda or cpu; detected when unset"
        " (npu-smi or /dev/davinci* -> Ascend, nvidia-smi with a GPU -> CUDA, else CPU).",
    )
    mm_merge: Literal["auto", "index", "off"] = Field(
        "auto",
        description="vLLM's multimodal merge inside the engine (engine/platforms/mm_merge.py, a vLLM plugin): auto"
        " replaces its boolean-mask assignment with an index_copy_ where the platform needs it (310P, vllm-ascend"
        " #12086) unless the installed vllm-ascend fixes it itself; index replaces it everywhere; off never.",
    )
    hccl_if_ip: str | None = Field(
        None, validation_alias=AliasChoices("VLBATCH_HCCL_IF_IP", "HCCL_IF_IP"), description="HCCL's bind address."
    )
    hccl_socket_ifname: str | None = Field(
        None, validation_alias=AliasChoices("VLBATCH_HCCL_SOCKET_IFNAME", "HCCL_SOCKET_IFNAME")
    )
    gloo_socket_ifname: str | None = Field(
        None, validation_alias=AliasChoices("VLBATCH_GLOO_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")
    )
    tp_socket_ifname: str | None = Field(
        None, validation_alias=AliasChoices("VLBATCH_TP_SOCKET_IFNAME", "TP_SOCKET_IFNAME")
    )
    ascend_toolkit_home: Path | None = Field(
        None,
        validation_alias=AliasChoices("VLBATCH_ASCEND_TOOLKIT_HOME", "ASCEND_TOOLKIT_HOME"),
        description="CANN install (set by set_env.sh); doctor reads its version files.",
    )
    celery_node: str | None = Field(
        None, description="Celery node name of this worker (distinct per engine on one host), e.g. chip4@%h."
    )
    heartbeat_file: Path | None = Field(
        None, description="Touched while the engine makes progress or idles; the health check reads its age."
    )
    engine_load_ledger: Path | None = Field(
        None,
        description="A file every engine load of this process appends a line to (engine.runtime.load_ledger); the test "
        "suite sets one for its whole run and reports the count.",
    )
    engine_stall_s: float = Field(
        300.0, gt=0, description="An engine with work in flight and no finished step for this long is hung."
    )
    telemetry_interval_s: float = Field(10.0, gt=0, le=3600, description="How often a worker samples its chips.")
    breaker_crashes: int = Field(
        3,
        ge=2,
        le=100,
        description="Consecutive engine crashes, each running alone on a different item with no answer between,"
        " that mean the deployment is broken: the worker's breaker opens (no claims, held items go back uncharged).",
    )
    engine_loads_per_hour: int = Field(
        20, ge=1, description="At most this many engine loads per hour per worker; past it the breaker opens."
    )
    breaker_backoff_s: float = Field(
        30.0, gt=0, description="Wait before the first reload after the breaker opens; doubles on every failed canary."
    )
    breaker_backoff_max_s: float = Field(
        900.0, gt=0, description="The longest wait between reloads while the breaker is open."
    )
    canary_timeout_s: float = Field(
        120.0,
        gt=0,
        description="A canary request (one image, one text prompt after each load) unanswered this long"
        " means the engine hangs: engine_canary_failed.",
    )
    energy_interval_s: float = Field(
        10.0, gt=0, le=3600, description="How often an engine worker reads its chips' power and books it to jobs."
    )
    price_per_kwh: float | None = Field(None, ge=0, description="Electricity price per kWh; jobs then show a cost.")
    # The busy 300I Duo sample in tests/engine/fixtures ran at 78-86 C under load, so the limit sits above that.
    thermal_limit_c: float = Field(95.0, gt=0, le=150, description="Stop claiming chunks when a chip reaches this.")
    thermal_resume_c: float = Field(88.0, gt=0, le=150, description="Claim again once every chip is at or below this.")
    thermal_max_wait_s: float = Field(600.0, ge=0, description="Longest a task waits for its chips to cool.")
    xmp_keyword_root: str = Field(
        "AI",
        pattern=r"[^|/\s]",
        max_length=200,
        description="The parent of machine-made keywords in XMP sidecars (`AI|<tag>` in lr:hierarchicalSubject, "
        "`AI/<tag>` in digiKam:TagsList), so a photo manager can filter them; `|` or `/` nest levels (`AI/vlbatch`). "
        "`vlbatch eval --labels-from xmp` leaves keywords under it out of the library's own.",
    )
    # --- large jobs ---
    max_item_line_bytes: int = Field(
        1024 * 1024,
        ge=1024,
        description="Longest item line of an NDJSON job upload (POST /v1/jobs/ndjson); a longer line refuses the job "
        "(item_line_too_long), nothing stored. The upload as a whole is bounded by its item count, not by "
        "VLBATCH_MAX_REQUEST_BYTES.",
    )

    @field_validator("worker_queues", mode="before")
    @classmethod
    def _split_queues(cls, value: object) -> object:
        if isinstance(value, str):
            return [q.strip() for q in value.split(",") if q.strip()]
        return value

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper_level(cls, value: object) -> object:
        return (value.upper() or None) if isinstance(value, str) else value

    @field_validator("url_allow_networks", "url_allow_hosts", "trusted_proxies", mode="before")
    @classmethod
    def _split_commas(cls, value: object) -> object:
        if isinstance(value, str):
            return [p.strip() for p in value.split(",") if p.strip()]
        return value

    @field_validator("allowed_input_roots", mode="before")
    @classmethod
    def _split_roots(cls, value: object) -> object:
        if isinstance(value, str):
            return [Path(p.strip()) for p in value.split(",") if p.strip()]
        return value

    @field_validator("allowed_s3_prefixes", mode="before")
    @classmethod
    def _split_s3_prefixes(cls, value: object) -> object:
        if isinstance(value, str):
            value = [p.strip() for p in value.split(",") if p.strip()]
        if isinstance(value, list):
            bad = [
                p for p in value if not (isinstance(p, str) and re.fullmatch(r"s3://[a-z0-9][a-z0-9.-]{1,62}(/.*)?", p))
            ]
            if bad:
                raise ValueError(f"allowed_s3_prefixes {bad} must read s3://bucket or s3://bucket/prefix")
        return value

    @field_validator("visible_devices", mode="before")
    @classmethod
    def _split_devices(cls, value: object) -> object:
        if isinstance(value, str):
            try:
                return [int(p) for p in value.split(",") if p.strip()]
            except ValueError:
                msg = f"visible devices {value!r} must be integers separated by commas, e.g. 0,1,4,5"
                raise ValueError(msg) from None
        return value

    @model_validator(mode="after")
    def _thermal_hysteresis(self) -> Settings:
        if self.thermal_resume_c >= self.thermal_limit_c:
            raise ValueError(
                f"thermal_resume_c={self.thermal_resume_c} must be below thermal_limit_c={self.thermal_limit_c}"
                " (the gap is the hysteresis that stops the gate flapping)"
            )
        return self

    def quota(self, tenant: str) -> TenantQuota:
        """``tenant``'s quotas: its ``tenant_quotas`` entry, each unset field from the ``tenant_max_*`` settings."""
        own = self.tenant_quotas.get(tenant, TenantQuota())
        return TenantQuota(
            max_items_per_job=own.max_items_per_job or self.tenant_max_items_per_job,
            max_active_jobs=own.max_active_jobs or self.tenant_max_active_jobs,
            max_upload_bytes=own.max_upload_bytes or self.tenant_max_upload_bytes,
            max_upload_total_bytes=own.max_upload_total_bytes or self.tenant_max_upload_total_bytes,
            max_upload_files=own.max_upload_files or self.tenant_max_upload_files,
        )

    @property
    def served_model_name(self) -> str | None:
        if self.model_name:
            return self.model_name
        return Path(self.model_path).name if self.model_path else None


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()

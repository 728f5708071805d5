"""The API service's sections: its store, broker, logs, clients, access, HTTP limits, dashboard, quotas and dry
runs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, Field, SecretStr, field_validator
from pydantic_settings import NoDecode

from vlbatch.settings.section import Section, split_commas


class Database(Section):
    """Where the database is."""

    database_url: str = Field(
        "sqlite:///./vlbatch.db",
        description="SQLAlchemy URL; PostgreSQL as postgresql+psycopg://user@host/db.",
    )


class Broker(Section):
    """The Celery broker and this worker's node name on it."""

    broker_url: str = Field("redis://127.0.0.1:6379/0", description="Celery broker (Redis).")
    celery_node: str | None = Field(
        None, description="Celery node name of this worker (distinct per engine on one host), e.g. chip4@%h."
    )


class Logging(Section):
    """Log level, format and a command's log file."""

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

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper_level(cls, value: object) -> object:
        return (value.upper() or None) if isinstance(value, str) else value


class Client(Section):
    """The client side (`vlbatch jobs`): where the API is and the key to show it."""

    api_url: str = Field("http://127.0.0.1:8000", description="The API `vlbatch jobs` talks to.")
    api_key: SecretStr | None = Field(None, description="The API key `vlbatch jobs` sends (Authorization: Bearer).")


class Access(Section):
    """API keys and who the API believes (api.deps, cli.serve)."""

    auth: Literal["on", "off"] = Field(
        "on",
        description="API key authentication (keys from `vlbatch keys create`). 'off' only for an embedded or "
        "dev API on a trusted host: every request then acts as the admin of tenant 'default'.",
    )
    auth_open_docs: bool = Field(False, description="Serve /docs and /openapi.json without a key.")
    auth_open_metrics: bool = Field(
        False, description="Serve /metrics without a key (a scraper on a trusted network); else it takes an admin key."
    )
    trusted_proxies: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["127.0.0.1"],
        description="Addresses or CIDRs (comma separated, * for any) whose X-Forwarded-Proto and X-Forwarded-For "
        "the API believes: set it to the TLS proxy's (an Ingress controller's pod network) so the dashboard's "
        "cookie is marked Secure behind it.",
    )

    @field_validator("trusted_proxies", mode="before")
    @classmethod
    def _split_proxies(cls, value: object) -> object:
        return split_commas(value)


class Http(Section):
    """Limits of the HTTP server and its health check (cli.serve, api)."""

    max_request_bytes: int = Field(
        16 * 1024 * 1024,
        ge=1024,
        description="Largest request body the API reads (Content-Length or chunked; 413 past it). /v1/files has "
        "its own cap.",
    )
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
    readyz_timeout_s: float = Field(
        2.0, gt=0, le=60, description="Longest /readyz waits for its test write (a held lock counts as not ready)."
    )


class Dashboard(Section):
    """The dashboard: its login, hand-made tags and thumbnails."""

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


class TenantQuota(BaseModel):
    """One tenant's quotas; a field left unset falls back to the ``tenant_max_*`` setting."""

    max_items_per_job: int | None = Field(None, ge=1)
    max_active_jobs: int | None = Field(None, ge=1)
    max_upload_bytes: int | None = Field(None, ge=1)
    max_upload_total_bytes: int | None = Field(None, ge=1)
    max_upload_files: int | None = Field(None, ge=1)


class Quotas(Section):
    """The quotas each tenant gets (jobs.quotas)."""

    tenant_max_items_per_job: int | None = Field(
        None, ge=1, description="Items one job of a tenant may hold (413 above it); unset: VLBATCH_MAX_ITEMS_PER_JOB."
    )
    tenant_max_active_jobs: int | None = Field(
        100, ge=1, description="Unfinished (queued or running) jobs a tenant may have at once (429 above it)."
    )
    tenant_max_upload_bytes: int | None = Field(
        None, ge=1, description="Bytes one upload of a tenant may hold (413 above it); unset: VLBATCH_MAX_UPLOAD_BYTES."
    )
    tenant_max_upload_total_bytes: int | None = Field(
        20 * 1024**3,
        ge=1,
        description="Bytes a tenant's uploaded files (/v1/files) may hold together (413 above it; delete some).",
    )
    tenant_max_upload_files: int | None = Field(
        1000, ge=1, description="Uploaded files (/v1/files) a tenant may hold at once (413 above it; delete some)."
    )
    tenant_quotas: dict[str, TenantQuota] = Field(
        default_factory=dict,
        description="Per-tenant overrides of the tenant_max_* quotas, e.g. "
        '\'{"acme": {"max_active_jobs": 20, "max_items_per_job": 100000}}\'.',
    )

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


class DryRun(Section):
    """Dry runs: the work one estimate may do in the API, and how many a tenant runs at once."""

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

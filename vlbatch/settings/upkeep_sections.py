"""The sections of the service's upkeep: what is deleted when (retention and the janitor) and how webhooks are
sent."""

from __future__ import annotations

from pydantic import Field

from vlbatch.settings.section import Section


class Retention(Section):
    """How long ended jobs, files, engine samples and webhook deliveries are kept, and the janitor that deletes
    them."""

    # Off by default: an upgrade never starts deleting what clients were never told would go. Explicit expiries
    # (a batch's output_expires_after, a file's expires_after) are honoured whatever these say.
    retention_jobs_s: int = Field(
        0,
        ge=0,
        description="How long an ended job (finished or cancelled) is kept with its items, results, document parts "
        "and thumbnails, from its end; 0: for ever. A tenant's own (`vlbatch keys retention`) wins.",
    )
    retention_files_s: int = Field(
        0,
        ge=0,
        description="How long an uploaded or batch output file is kept, from its upload; 0: for ever. A file's own "
        "`expires_after` and a tenant's own (`vlbatch keys retention`) win.",
    )
    retention_engine_samples_s: int = Field(
        7 * 86400, ge=0, description="How long engine samples (throughput charts, dry-run rates) are kept; 0: for ever."
    )
    retention_webhook_deliveries_s: int = Field(
        7 * 86400, ge=0, description="How long delivered or failed webhook deliveries are kept; 0: for ever."
    )
    janitor_interval_s: float = Field(
        3600.0,
        ge=0,
        description="How often the API runs the janitor that deletes what expired (one host at a time); 0: never "
        "(`vlbatch gc` still does).",
    )
    janitor_batch_rows: int = Field(
        1000, ge=1, le=100_000, description="Rows the janitor deletes per transaction, so no lock is held long."
    )


class Webhooks(Section):
    """Webhook URLs' reach, one delivery attempt's bounds, retries, and the sender thread."""

    webhook_allow_loopback: bool = Field(
        False, description="Let webhook URLs reach loopback and private addresses (other special ones stay refused)."
    )
    webhook_timeout_s: float = Field(10.0, gt=0, le=60, description="Deadline of one webhook delivery attempt in all.")
    webhook_max_answer_bytes: int = Field(4096, ge=0, le=65536, description="Bytes of a webhook answer read, at most.")
    webhook_retry_base_s: float = Field(
        30.0, gt=0, description="First webhook retry's wait; doubled per attempt (jittered) up to an hour."
    )
    webhook_retry_for_s: float = Field(86400.0, gt=0, description="How long a webhook delivery is retried.")
    webhook_disable_after_s: float = Field(
        86400.0, gt=0, description="A webhook endpoint whose every attempt failed this long is disabled."
    )
    webhook_poll_s: float = Field(2.0, gt=0, description="How often the webhook sender looks for due deliveries.")
    webhook_sender: bool = Field(True, description="Run the webhook sender thread in this process (API, workers).")

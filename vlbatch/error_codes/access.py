"""Error codes of access: API keys, tenants, quotas (``api.deps``, ``jobs.quotas``, ``vlbatch.db.keys``).

Registered in the order below; ``vlbatch.errors`` re-exports each constant, and callers import it from there.
"""

from __future__ import annotations

from vlbatch.error_codes.registry import _define

UNAUTHORIZED = _define(
    "unauthorized",
    401,
    {"api"},
    "No API key, or the key is unknown or revoked; send `Authorization: Bearer <key>` or `X-API-Key: <key>` "
    "(keys come from `vlbatch keys create`).",
)
ADMIN_REQUIRED = _define(
    "admin_required", 403, {"api"}, "The route takes an admin key (`vlbatch keys create --admin`)."
)
CROSS_SITE_REFUSED = _define(
    "cross_site_refused",
    403,
    {"api"},
    "A browser sent a state-changing request from another site (`Sec-Fetch-Site`); the API takes none.",
)
ITEMS_QUOTA_EXCEEDED = _define(
    "items_quota_exceeded",
    413,
    {"api"},
    "The job has more items than the tenant's quota (`VLBATCH_TENANT_MAX_ITEMS_PER_JOB` or `VLBATCH_TENANT_QUOTAS`).",
)
ACTIVE_JOBS_QUOTA_EXCEEDED = _define(
    "active_jobs_quota_exceeded",
    429,
    {"api"},
    "The tenant has as many unfinished jobs as its quota allows (`VLBATCH_TENANT_MAX_ACTIVE_JOBS`); retry when "
    "one finishes or cancel one.",
    retryable=True,
)
UPLOAD_QUOTA_EXCEEDED = _define(
    "upload_quota_exceeded",
    413,
    {"api"},
    "The upload is bigger than the tenant's quota (`VLBATCH_TENANT_MAX_UPLOAD_BYTES` or `VLBATCH_TENANT_QUOTAS`).",
)
DRY_RUN_BUSY = _define(
    "dry_run_busy",
    429,
    {"api"},
    "The tenant has as many dry runs running as it may (`VLBATCH_DRY_RUN_CONCURRENCY`); retry when one answers.",
    retryable=True,
)
UPLOADS_HELD_QUOTA_EXCEEDED = _define(
    "uploads_held_quota_exceeded",
    413,
    {"api"},
    "The tenant's uploaded files would hold more bytes or files than its quota "
    "(`VLBATCH_TENANT_MAX_UPLOAD_TOTAL_BYTES`, `VLBATCH_TENANT_MAX_UPLOAD_FILES` or `VLBATCH_TENANT_QUOTAS`); "
    "delete files it no longer needs (`DELETE /v1/files/{id}`).",
)
KEY_NOT_FOUND = _define("key_not_found", 404, {"cli"}, "No API key has this id.")

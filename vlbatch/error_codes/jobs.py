"""Error codes of jobs and their pipelines: making, reading and acting on jobs, items, queues and templates.

Registered in the order below; ``vlbatch.errors`` re-exports each constant, and callers import it from there.
"""

from __future__ import annotations

from vlbatch.error_codes.registry import _define

UNKNOWN_PIPELINE = _define("unknown_pipeline", 422, {"item", "api"}, "The job names a pipeline that is not registered.")
INVALID_OPTIONS = _define("invalid_options", 422, {"item", "api"}, "The job's options are not valid for its pipeline.")
INVALID_SCHEMA = _define(
    "invalid_schema",
    422,
    {"api", "cli"},
    "The extract schema cannot drive an extraction (within job options it shows as `invalid_options`).",
)
INVALID_PIPELINE = _define(
    "invalid_pipeline",
    500,
    {"worker", "cli"},
    "A pipeline is declared incompletely or twice, or one of the other kind was asked for.",
)
INVALID_ITEMS = _define(
    "invalid_items",
    422,
    {"api"},
    "The job's items do not fit its pipeline's kind (images for image pipelines, paths for document ones).",
)
INVALID_REQUEST = _define(
    "invalid_request",
    422,
    {"api"},
    "The request's body, query or headers do not fit the route's schema (a missing or unknown field, a wrong type,"
    " a value past its cap, NUL or a lone surrogate in a string); `detail` lists the faults or names the one.",
)
UNPARSABLE_BODY = _define(
    "unparsable_body",
    400,
    {"api"},
    "The request body cannot be parsed as its content type says (JSON nested too deep, or a broken multipart).",
)
IDEMPOTENCY_KEY_REUSED = _define(
    "idempotency_key_reused",
    409,
    {"api"},
    "The Idempotency-Key was used before with another body or route; a retry must repeat the request exactly.",
)
WRONG_PIPELINE_KIND = _define("wrong_pipeline_kind", 422, {"api"}, "The route takes pipelines of the other kind.")
NO_MODEL = _define("no_model", 422, {"api"}, "No model was given and none is configured (`VLBATCH_MODEL_PATH`).")
TOO_MANY_ITEMS = _define(
    "too_many_items",
    422,
    {"api"},
    "The job has more items than `VLBATCH_MAX_ITEMS_PER_JOB`, or the request lists more inline items than "
    "`VLBATCH_MAX_ITEMS_PER_REQUEST`.",
)
DEADLINE_UNMEETABLE = _define(
    "deadline_unmeetable",
    422,
    {"api", "cli"},
    "The job's `deadline` is before the finish its estimate expects, and `strict_deadline` asked to refuse it "
    "rather than accept it with a warning.",
)
ITEM_LINE_TOO_LONG = _define(
    "item_line_too_long",
    413,
    {"api"},
    "A line of an NDJSON job upload is longer than `VLBATCH_MAX_ITEM_LINE_BYTES`; the job is refused at that line "
    "(its number in the message) and nothing is stored.",
)
NO_INPUTS = _define("no_inputs", 422, {"api", "cli"}, "The folder holds no input files the job could take.")
INPUT_PATH_REFUSED = _define(
    "input_path_refused",
    422,
    {"api", "cli", "worker"},
    "The folder or file asked for is missing, or outside the tenant's roots (`vlbatch keys roots`; by default "
    "`VLBATCH_ALLOWED_INPUT_ROOTS`; an `s3://` folder: outside the tenant's object-store prefixes, by default "
    "`VLBATCH_ALLOWED_S3_PREFIXES`, or the store refused the listing); the answer names no root or prefix.",
)
INVALID_TENANT_ROOTS = _define(
    "invalid_tenant_roots",
    422,
    {"cli"},
    "A tenant's roots (`vlbatch keys roots`) must be absolute folders inside `VLBATCH_ALLOWED_INPUT_ROOTS`, its "
    "`--s3` prefixes `s3://bucket/prefix` inside `VLBATCH_ALLOWED_S3_PREFIXES`.",
)
MODEL_NOT_SERVED = _define(
    "model_not_served",
    409,
    {"api"},
    "Workers are live but none serves the job's model (`VLBATCH_MODEL_NOT_SERVED=refuse`; by default the job is "
    "made with a warning, repeated by `GET /v1/jobs/{id}` while it waits): the message names the models live "
    "workers serve; use one of them, or start a worker for it.",
    retryable=True,
)
JOB_NOT_FOUND = _define("job_not_found", 404, {"api", "cli"}, "No job has this id.")
JOB_STATE_CONFLICT = _define(
    "job_state_conflict",
    409,
    {"api"},
    "The job's state does not allow this: only a queued or running job pauses, only a paused one resumes, "
    "a finished or cancelled job cannot be cancelled.",
)
BATCH_OWNED_JOB = _define(
    "batch_owned_job",
    409,
    {"api"},
    "The job runs the lines of an OpenAI batch: it is cancelled and read through `/v1/batches/{id}`, not driven "
    "through `/v1/jobs` (cancel, pause, resume, rerun, retry).",
)
QUEUE_STATE_CONFLICT = _define(
    "queue_state_conflict", 409, {"api"}, "Only a running queue pauses and only a paused one resumes."
)
ITEM_NOT_FOUND = _define("item_not_found", 404, {"api"}, "The job has no item with this id.")
NO_RESULT_TO_TAG = _define(
    "no_result_to_tag", 409, {"api"}, "The item has no result yet; tags are edited on an item's result."
)
TOO_MANY_MANUAL_TAGS = _define(
    "too_many_manual_tags",
    409,
    {"api"},
    "The edit would leave the result with more tags added or removed by hand than `VLBATCH_MAX_MANUAL_TAGS`.",
)
NOTHING_TO_RERUN = _define("nothing_to_rerun", 409, {"api"}, "The job has no items the rerun scope selects.")
BAD_CURSOR = _define("bad_cursor", 422, {"api"}, "The page cursor is not one the API handed out.")
INVALID_TEMPLATE = _define(
    "invalid_template",
    422,
    {"cli", "worker"},
    "A job template cannot be created or run as given (cron, options, folder or name).",
)

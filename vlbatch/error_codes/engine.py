"""Error codes of the model's answer and of the engine that produced it.

Registered in the order below; ``vlbatch.errors`` re-exports each constant, and callers import it from there.
"""

from __future__ import annotations

from vlbatch.error_codes.registry import _define

PARSE_ERROR = _define("parse_error", 502, {"item"}, "The model's answer is not the JSON the pipeline expects.")
OUTPUT_TRUNCATED = _define(
    "output_truncated",
    502,
    {"item"},
    "Generation stopped at max_tokens before the JSON answer closed; raise the pipeline's output limits.",
)
ENGINE_REJECTED = _define(
    "engine_rejected", 422, {"item"}, "The engine refused the request (e.g. a prompt longer than `max_model_len`)."
)
ENGINE_CRASH = _define(
    "engine_crash", 500, {"item", "worker"}, "The engine crashed on this item every time it ran (retried alone first)."
)
ENGINE_CANARY_FAILED = _define(
    "engine_canary_failed",
    503,
    {"api", "worker", "cli"},
    "The engine crashed or hung on the worker's canary (one small image and one text request after a load), or"
    " crashed on several items in a row: the deployment is broken, not the items. Nothing is claimed; the items"
    " stay queued.",
    retryable=True,
)
ENGINE_STOPPED = _define(
    "engine_stopped",
    503,
    {"worker"},
    "The engine was shut down with requests still queued or running; the work goes back to the queue.",
    retryable=True,
)

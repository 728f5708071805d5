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
ANSWER_LANGUAGE_MISMATCH = _define(
    "answer_language_mismatch",
    422,
    {"item"},
    "A warning, not a failure: the answer's tags or caption are still in another language than the tagging option"
    " `language` after one more round asked for them in it; the answer is stored with this code in its"
    " `warnings`. A model too small to follow the language may need a larger one, or a `vocabulary` in the"
    " language.",
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
CONTEXT_OVER_MODEL = _define(
    "context_over_model",
    422,
    {"worker", "cli"},
    "The engine's `max_model_len` is above the model's own context (config.json's `max_position_embeddings`, or"
    " its text config's); lower it or leave it unset (the model's own is the default).",
)
KV_CACHE_OVER_MEMORY = _define(
    "kv_cache_over_memory",
    422,
    {"worker", "cli"},
    "On a CPU host, the KV cache the engine settings ask for (`kv_cache_memory_bytes`, `gpu_memory_utilization` of"
    " all RAM, or one sequence of `max_model_len`) is more than the memory available now; leave them unset to size"
    " it from the model.",
)
KV_CACHE_TOO_SMALL = _define(
    "kv_cache_too_small",
    422,
    {"worker", "cli"},
    "`kv_cache_memory_bytes` cannot hold one sequence of `max_model_len` tokens, which the engine refuses to start"
    " with; raise it or lower `max_model_len`.",
)
ENGINE_LOAD_FAILED = _define(
    "engine_load_failed",
    503,
    {"worker", "cli"},
    "The engine did not load (vLLM refused its arguments, ran out of memory, or its process died); the log has"
    " the engine's own error.",
    retryable=True,
)

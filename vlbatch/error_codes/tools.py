"""Error codes of devices, planning and the command-line tools, and ``internal_error``, the catch-all code of
an unexpected failure (the default of ``vlbatch.errors.VlbatchError``).

Registered in the order below; ``vlbatch.errors`` re-exports each constant, and callers import it from there.
"""

from __future__ import annotations

from vlbatch.error_codes.registry import _define

DEVICE_TOOL_MISSING = _define(
    "device_tool_missing",
    503,
    {"worker", "cli"},
    "The platform's device tool (npu-smi, nvidia-smi) is not installed or not mounted into the container.",
)
DEVICE_DISCOVERY_FAILED = _define(
    "device_discovery_failed",
    503,
    {"worker", "cli"},
    "The platform's device tool failed or printed something unreadable.",
    retryable=True,
)
PLATFORM_REFUSAL = _define(
    "platform_refusal", 422, {"worker", "cli"}, "A setting contradicts what the device platform supports."
)
NO_CHAT_TEMPLATE = _define(
    "no_chat_template", 500, {"worker", "cli"}, "The model directory has no usable chat template."
)
MODEL_CONFIG_INVALID = _define(
    "model_config_invalid",
    422,
    {"cli", "worker"},
    "The model directory is not a model (no config.json), or its config.json is unreadable or lacks a field the "
    "planner needs.",
)
PLAN_IMPOSSIBLE = _define(
    "plan_impossible", 422, {"cli"}, "The launch plan does not fit the devices or contradicts the platform."
)
QUANTIZE_REFUSED = _define(
    "quantize_refused", 422, {"cli"}, "The model, calibration set or kernel argument cannot be quantized as asked."
)
INVALID_SWEEP = _define(
    "invalid_sweep", 422, {"cli"}, "`vlbatch bench --sweep` is not `PARAM=V1,V2,...` with a sweepable parameter."
)
UNKNOWN_ARM = _define("unknown_arm", 422, {"cli"}, "`vlbatch bench --arms` names an arm that does not exist.")
BAD_LABELS = _define(
    "bad_labels",
    422,
    {"cli"},
    "`vlbatch eval`: the labels file (or `--synonyms` file) is unreadable, or a record lacks a path or has a bad"
    " field (a synonym maps to something that is not a word, a list of words or nothing).",
)
REMOTE_ERROR = _define(
    "remote_error",
    502,
    {"cli"},
    "`vlbatch jobs` could not reach the API at `VLBATCH_API_URL`, or the API refused the request (its code follows).",
    retryable=True,
)
XMP_ERROR = _define(
    "xmp_error",
    422,
    {"cli"},
    "`vlbatch xmp` cannot write a photo's XMP: the JPEG copy's headers are malformed or the packet is too big.",
)
INVALID_SETTINGS = _define(
    "invalid_settings",
    422,
    {"cli", "worker"},
    "A `VLBATCH_*` environment variable (or `.env` line) has a value its setting does not take; the message names it.",
)
DATABASE_LOGIN_REFUSED = _define(
    "database_login_refused",
    503,
    {"cli", "worker"},
    "PostgreSQL refused `VLBATCH_DATABASE_URL`'s login: its role or database does not exist, or the password is "
    "wrong; the message names the command that creates them.",
)
BROKER_UNAVAILABLE = _define(
    "broker_unavailable",
    503,
    {"cli", "worker"},
    "The broker `VLBATCH_BROKER_URL` names cannot be reached, or the URL is not a broker's (`redis://host:port/db`).",
    retryable=True,
)
INTERNAL_ERROR = _define(
    "internal_error",
    500,
    {"api", "cli"},
    "An unexpected failure inside vlbatch; the log has the traceback (`-v` prints it on a command's terminal).",
)
JANITOR_BUSY = _define(
    "janitor_busy",
    409,
    {"cli"},
    "`vlbatch gc` found another host's janitor running a pass (it holds the lease); try again when it ends.",
    retryable=True,
)

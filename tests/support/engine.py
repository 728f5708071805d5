"""The suite's real engine: the one configuration of the tiny model that real-engine tests load, and the
environment a test hands to the vlbatch commands it runs.

An engine load costs about a minute here and several on a loaded machine, so every real-engine test uses
``TEST_ENGINE`` (and shares one loaded engine where it can: docs/testing.md); a test that needs another
configuration says why beside it. Every load, in the test process or in a command a test runs, is counted in the
run's ledger (``VLBATCH_ENGINE_LOAD_LEDGER``, set by tests/conftest.py), which the run reports and a budget test
holds.
"""

from __future__ import annotations

import os
from pathlib import Path

# float32 (the CPU build's fastest exact path), a fixed KV cache (no profiling of RAM), no graph capture.
TEST_ENGINE: dict[str, object] = {
    "dtype": "float32",
    "max_model_len": 2048,
    "kv_cache_memory_bytes": 256 << 20,
    "enforce_eager": True,
    "max_num_seqs": 16,
}

LEDGER_ENV = "VLBATCH_ENGINE_LOAD_LEDGER"

# The most vLLM engine loads a whole run may make (tests/test_engine_budget.py holds it): the shared engine and its
# restart after the core-death test, the service rig's worker, the broken engine's two, the demo and the eval compare
# run's two. A test that needs a load of its own raises this beside it and says why in docs/testing.md.
ENGINE_LOAD_BUDGET = 8


def ledger() -> Path | None:
    """The run's engine-load ledger (None when the suite's conftest did not set one)."""
    value = os.environ.get(LEDGER_ENV)
    return Path(value) if value else None


def child_env(**extra: str) -> dict[str, str]:
    """This process's environment without its ``VLBATCH_`` settings (a command under test reads only what the test
    gives it), but with the run's engine-load ledger, so the command's loads are counted; then ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLBATCH_")}
    if (path := ledger()) is not None:
        env[LEDGER_ENV] = str(path)
    env.update(extra)
    return env

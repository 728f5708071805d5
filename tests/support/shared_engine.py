"""The run's one in-process real engine: the tiny model on ``TEST_ENGINE``, loaded once and lent to every test that
asks for ``shared_engine`` (``worker.lent_engine``): the embedded runs and the vlbatch commands such a test calls in
this process (``vlbatch_cli``) take it instead of loading their own.

A test that breaks the engine (the core-death test) is marked ``engine_last`` and runs after the others of its group;
the engine it leaves is closed and never handed on: a later test would load a new one, which the run's ledger
counts. A test that is not ``engine_last`` must leave it as it found it (loaded, healthy, the same generation) and
load no engine of its own: a teardown error says when it did not.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.support.engine import LEDGER_ENV, TEST_ENGINE, ledger

if TYPE_CHECKING:  # the engine is imported only when a test needs it
    from click.testing import Result

    from engine.runtime.runner import EngineRunner

# Longer than any step of the tiny model on a loaded machine: a healthy engine idle between tests is never stuck.
_STALL_S = 600.0


class SharedEngine:
    """The loaded runner, reloaded only when a test left it dead (each load counted in the ledger)."""

    def __init__(self, model: Path) -> None:
        self.model = model
        self._runner: EngineRunner | None = None

    def runner(self) -> EngineRunner:
        from engine.runtime.config import EngineConfig
        from engine.runtime.runner import EngineRunner

        if self._runner is None:
            config = EngineConfig.model_validate({**TEST_ENGINE, "model": str(self.model)})
            runner = EngineRunner(config, load_ledger=ledger())
            runner.load()
            self._runner = runner
        return self._runner

    def usable(self) -> bool:
        return self._runner is not None and self._runner.healthy(max_stall_s=_STALL_S)

    def close(self) -> None:
        if self._runner is not None:
            runner, self._runner = self._runner, None
            runner.close(abandon=True)


@pytest.fixture(scope="session")
def shared_engines(tiny_model: Path) -> Iterator[SharedEngine]:
    """The holder of the run's shared engine; closed at the end of the run."""
    holder = SharedEngine(tiny_model)
    yield holder
    holder.close()


@pytest.fixture
def shared_engine(shared_engines: SharedEngine, request: pytest.FixtureRequest) -> Iterator[EngineRunner]:
    """The shared engine, lent for this test: embedded runs of the tiny model here run on it."""
    pytest.importorskip("vllm")
    from worker.lent_engine import lend_engine

    runner = shared_engines.runner()
    generation, loads = runner.generation, _loads()
    with lend_engine(runner):
        yield runner
    if request.node.get_closest_marker("engine_last") is not None:
        shared_engines.close()  # it broke the engine (its core may still be dying): never handed to a later test
        return
    if not shared_engines.usable() or runner.generation != generation:
        shared_engines.close()
        pytest.fail(
            f"the test left the shared engine {'restarted' if shared_engines.usable() else 'broken'} "
            "(mark a test that breaks it engine_last)"
        )
    # Whatever the test ran in this process took the lent engine: nothing loaded one of its own.
    assert _loads() == loads, "an embedded run on the shared engine's model loaded an engine of its own"


def _loads() -> int:
    from engine.runtime.load_ledger import loads

    path = ledger()
    return len(loads(path)) if path is not None else 0


def vlbatch_cli(args: list[str], *, env: Mapping[str, str] | None = None) -> Result:
    """Run a vlbatch command in this process (typer's runner on the real app), so it reaches the lent engine. As in
    ``child_env``, the command reads no ``VLBATCH_`` setting of this process but the ledger, then ``env``; its
    stdout and stderr are the result's."""
    from typer.testing import CliRunner

    from cli.main import app
    from vlbatch.settings import get_settings

    cleared: dict[str, str | None] = {k: None for k in os.environ if k.startswith("VLBATCH_") and k != LEDGER_ENV}
    # The commands read the process's one Settings (get_settings, cached): read afresh from this environment, and
    # not left behind for the next test of the process.
    get_settings.cache_clear()
    try:
        return CliRunner().invoke(app, args, env={**cleared, **(env or {})}, catch_exceptions=False)
    finally:
        get_settings.cache_clear()

"""An engine loaded once and lent to the embedded runs of this process, which use it and leave it loaded.

Every embedded run (``vlbatch tag``, ``docs``, ``run-batch`` and ``eval`` in this process, and the functions of
``worker.embedded`` and ``worker.run_batch`` behind them) loads its own engine and closes it at the end: a minute or
more per run on a small CPU host. A notebook or a test session that runs several jobs on one model loads it once and
lends it::

    runner = EngineRunner(EngineConfig(model="/models/tagger", dtype="float32"))
    runner.load()
    with lend_engine(runner):
        tag_directory(settings, directory=a, model_dir=Path("/models/tagger"), ...)  # no load
        run_documents(settings, directory=b, model_dir=Path("/models/tagger"), ...)  # no load
    runner.close()

A run whose model directory is the lent runner's takes it (and logs that it did); a run of another model loads its
own engine as before. ``vlbatch worker`` run in such a process (a test session's, on its own thread) takes it too,
for its whole life, through :func:`lent_for`, and leaves it loaded when it stops. The lent engine keeps its own
engine arguments: a run's ``engine`` settings (``--engine``) do not apply to it. The run does not close it: its
feeder is closed, the runner stays loaded with the generation and the stall limit it had, so the next run gets a
working engine. One run uses it at a time; a second run waits.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from engine.runtime.config import EngineConfig
from engine.runtime.runner import EngineRunner

log = logging.getLogger(__name__)

_lent: EngineRunner | None = None
_lending = threading.Lock()  # guards _lent
_in_use = threading.Lock()  # one run at a time on the lent engine


@contextmanager
def lend_engine(runner: EngineRunner) -> Iterator[EngineRunner]:
    """While inside, embedded runs on ``runner``'s model run on ``runner`` (loaded by the caller, closed by the
    caller) instead of loading an engine of their own."""
    global _lent
    with _lending:
        if _lent is not None:
            raise RuntimeError(f"an engine for {_lent.config.model} is lent already; return it first")
        _lent = runner
    try:
        yield runner
    finally:
        with _lending:
            _lent = None


def _serves(runner: EngineRunner, config: EngineConfig) -> bool:
    """The lent runner serves a run of ``config``: the same model directory on the same backend (a stub run of the
    model must not take the real engine, nor a real run the stub)."""
    return (
        Path(runner.config.model).resolve() == Path(config.model).resolve() and runner.config.backend == config.backend
    )


def lent_for(config: EngineConfig) -> EngineRunner | None:
    """The lent runner when it serves ``config`` (the same model directory and backend), else None. For the engine
    worker, which holds its engine for its whole life: it does not take the one-run-at-a-time lock."""
    with _lending:
        return _lent if _lent is not None and _serves(_lent, config) else None


def is_lent(runner: EngineRunner) -> bool:
    """Whether ``runner`` is the one lent to this process (its borrower must not close it)."""
    with _lending:
        return runner is _lent


@contextmanager
def run_engine(config: EngineConfig, *, ledger: Path | None) -> Iterator[tuple[EngineRunner, bool]]:
    """The engine a run uses and whether it is loaded already: the lent one when it serves ``config.model``,
    otherwise a new runner (loaded by the caller), closed when the run ends."""
    with _lending:
        lent = _lent if _lent is not None and _serves(_lent, config) else None
    if lent is None:
        runner = EngineRunner(config, load_ledger=ledger)
        try:
            yield runner, False
        finally:
            runner.close()
        return
    with _in_use:
        log.info(
            "running on the lent engine for %s (generation %d, its own engine arguments); not loading one",
            config.model,
            lent.generation,
        )
        stall_s, generation = lent.stall_s, lent.generation
        try:
            yield lent, True
        finally:
            lent.stall_s = stall_s  # the run's feeder set its own; the lender's stays
            if lent.generation != generation:
                log.warning(
                    "the lent engine for %s was restarted during the run (generation %d -> %d)",
                    config.model,
                    generation,
                    lent.generation,
                )

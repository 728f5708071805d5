"""Embedded runs on a lent engine (worker.lent_engine): they take the runner lent for their model directory instead
of loading one, and leave it loaded and as it was, so the next run gets a working engine. The engine here is the
scripted one behind the real runner; the real engine's shared runs are the suite's engine tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from engine.runtime.config import EngineConfig
from pipelines import image_tagging
from tests.support.scripted import ScriptedEngine, scripted_runner
from vlbatch.settings import Settings
from worker.embedded import tag_directory
from worker.lent_engine import lend_engine, run_engine


def test_runs_take_the_lent_engine_and_leave_it_loaded(tmp_path: Path, tiny_model: Path) -> None:
    album = tmp_path / "album"
    album.mkdir()
    for i, colour in enumerate(["red", "green", "blue"]):
        Image.new("RGB", (64, 48), colour).save(album / f"{i}.png")
    engines: list[ScriptedEngine] = []
    runner = scripted_runner([], engines, EngineConfig(model=str(tiny_model)))
    runner.load()
    runner.stall_s = 123.0
    try:
        with lend_engine(runner):
            for n in range(2):  # the second run finds the engine the first one left
                run = tag_directory(
                    Settings(database_url=f"sqlite:///{tmp_path / f'{n}.db'}", engine={"max_num_seqs": 2}),
                    directory=album,
                    model_dir=tiny_model,
                    opts=image_tagging.TaggingOptions(),
                    out=tmp_path / f"{n}.jsonl",
                )
                assert run.counts["succeeded"] == 3
                # Not closed, reloaded or restarted; the run's feeder set its own stall limit, the lender's is back.
                assert runner.healthy(max_stall_s=60) and runner.generation == 1 and len(engines) == 1
                assert runner.stall_s == 123.0
                assert runner.config.max_num_seqs != 2  # the lent engine keeps its own arguments
    finally:
        runner.close()


def test_a_run_of_another_model_gets_its_own_runner_and_one_engine_is_lent_at_a_time(
    tmp_path: Path, tiny_model: Path
) -> None:
    engines: list[ScriptedEngine] = []
    runner = scripted_runner([], engines, EngineConfig(model=str(tiny_model)))
    with lend_engine(runner):
        with run_engine(EngineConfig(model=str(tmp_path / "other")), ledger=None) as (other, lent):
            assert other is not runner and not lent
        # The same directory by another path is the same model.
        same = tiny_model.parent / ".." / tiny_model.parent.name / tiny_model.name
        with run_engine(EngineConfig(model=str(same)), ledger=None) as (taken, lent):
            assert taken is runner and lent
        # The same model on the stub backend is another engine: a stub run never takes the real one.
        stub = EngineConfig(model=str(tiny_model), backend="stub")
        with run_engine(stub, ledger=None) as (own, lent):
            assert own is not runner and not lent
        with pytest.raises(RuntimeError, match="lent already"), lend_engine(runner):
            pass
    with run_engine(EngineConfig(model=str(tiny_model)), ledger=None) as (after, lent):
        assert after is not runner and not lent  # returned: runs load their own again

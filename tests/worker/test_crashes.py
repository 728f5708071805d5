"""Invariant 5 with a scripted engine: the runner's feeding and crash handling, and the feeder's blame.

The engine here is a stand-in with vLLM's ``add_request``/``step`` surface that crashes whenever a
poisoned prompt is in its batch, like vllm-ascend #12086 on 310P. It is not a model: it tests what the
runner and feeder do around a crash; the real engine is exercised in tests/e2e.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from pathlib import Path

import pytest
from PIL import Image
from sqlalchemy import select

from engine.runtime.requests import EngineCrashed, GenerationRequest, GenerationResult
from tests.support.albums import album_job
from tests.support.scripted import POISON, ScriptedEngine, scripted_context, scripted_runner
from vlbatch.db import job_store
from vlbatch.db.models import Chunk, Item
from worker.feeder import MAX_CRASHES_PER_ITEM, Feeder

pytestmark = pytest.mark.timeout(120)


def _req(rid: str, color: tuple[int, int, int] = (90, 120, 200), *, solo: bool = False) -> GenerationRequest:
    return GenerationRequest(request_id=rid, prompt="p", images=[Image.new("RGB", (28, 28), color)], solo=solo)


def _crash_of(fut: Future[GenerationResult]) -> EngineCrashed:
    with pytest.raises(EngineCrashed) as err:
        fut.result(10)
    return err.value


def test_requests_are_batched_and_a_crash_fails_those_in_flight() -> None:
    steps: list[list[str]] = []
    engines: list[ScriptedEngine] = []
    runner = scripted_runner(steps, engines)
    runner.load()
    results = [f.result(10) for f in runner.submit([_req(f"ok{i}") for i in range(4)])]
    assert [r.request_id for r in results] == [f"ok{i}" for i in range(4)]
    assert max(len(s) for s in steps) == 4  # all four ran side by side
    futs = runner.submit([_req("a"), _req("bad", POISON), _req("b")])
    errors = [_crash_of(f) for f in futs]
    assert {e.in_flight for e in errors} == {3} and {e.generation for e in errors} == {1}
    runner.restart(crashed_generation=1)
    runner.restart(crashed_generation=1)  # a second chunk saw the same crash: no second restart
    assert len(engines) == 2 and runner.generation == 2
    assert runner.submit([_req("after")])[0].result(10).text
    runner.close()


def test_a_solo_request_runs_alone_and_its_crash_is_its_own() -> None:
    steps: list[list[str]] = []
    engines: list[ScriptedEngine] = []
    runner = scripted_runner(steps, engines)
    runner.load()
    futs = runner.submit([_req("n1"), _req("s1", solo=True), _req("n2"), _req("s2", solo=True), _req("n3")])
    for f in futs:
        f.result(10)
    for batch in steps:
        assert not (set(batch) & {"s1", "s2"}) or len(batch) == 1, batch
    bad, late = runner.submit([_req("sbad", POISON, solo=True), _req("late")])
    assert _crash_of(bad).in_flight == 1
    assert _crash_of(late).in_flight == 0  # never reached the engine
    runner.close()


def test_feeder_pins_the_crash_on_the_poisoned_item_and_finishes_the_rest(tmp_path: Path) -> None:
    colors = [POISON if i == 3 else (40 * i % 256, 100, 150) for i in range(7)]
    album, sessions, job_id, chunk_ids = album_job(tmp_path, colors)
    steps: list[list[str]] = []
    engines: list[ScriptedEngine] = []
    runner = scripted_runner(steps, engines)
    runner.load()
    ctx = scripted_context(sessions, runner, album, owner="t", revision=None)
    # Both chunks at once, as the worker runs them: both see each crash, the engine restarts once per crash.
    feeder = Feeder(ctx)
    tickets = [feeder.add_chunk(cid) for cid in chunk_ids]
    assert all(t is not None for t in tickets)
    assert feeder.wait_idle(60)
    feeder.close()
    runner.close()
    with sessions() as s:
        items = {Path(i.ref or "").name: i for i in s.scalars(select(Item).where(Item.job_id == job_id))}
        counts = job_store.item_counts(s, job_id=job_id)
    assert counts["succeeded"] == 6 and counts["failed"] == 1
    assert items["3.png"].error_code == "engine_crash" and items["3.png"].crash_count == MAX_CRASHES_PER_ITEM
    assert all(i.crash_count == 0 for n, i in items.items() if n != "3.png")
    # Usually one crash with several items in flight, then one per solo retry of the poisoned item (the
    # first crash may already find it alone, when the items beside it finished first); one engine each.
    crashes = sum(1 for e in engines if e.dead)
    assert MAX_CRASHES_PER_ITEM <= crashes <= 1 + MAX_CRASHES_PER_ITEM
    assert len(engines) == crashes + 1


def test_a_dead_engine_refusing_new_requests_is_a_crash_not_their_fault() -> None:
    # vLLM's client raises EngineDeadError from add_request once its core has died: those requests never ran, so
    # they are a crash's innocent bystanders (retried after the restart), not refusals that fail their items.
    steps: list[list[str]] = []
    engines: list[ScriptedEngine] = []
    runner = scripted_runner(steps, engines)
    runner.load()
    assert runner.submit([_req("warm")])[0].result(10).text
    engines[0].dead = True  # the core died while the engine was idle
    crashes = [_crash_of(f) for f in runner.submit([_req("x"), _req("y")])]
    assert {c.in_flight for c in crashes} == {0} and {c.generation for c in crashes} == {1}
    runner.restart(crashed_generation=1)
    assert runner.submit([_req("after")])[0].result(10).text
    runner.close()


def test_requests_the_engine_aborts_on_its_way_down_are_bystanders_not_results() -> None:
    # vLLM's core, sent SIGTERM, aborts what it runs and ends those requests with finish_reason "abort" and the
    # text so far: that is no answer (parsing it would fail the items), and nothing in the requests caused it.
    engines: list[ScriptedEngine] = []
    gate = threading.Event()
    runner = scripted_runner([], engines, gate=gate)
    runner.load()
    futs = runner.submit([_req("a"), _req("b")])
    deadline = time.monotonic() + 10
    while runner.in_engine < 2:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    engines[0].aborting = True
    crashes = [_crash_of(f) for f in futs]
    assert {c.in_flight for c in crashes} == {0} and {c.generation for c in crashes} == {1}
    runner.close(abandon=True)


def test_a_crash_just_before_a_stop_restarts_nothing_and_fails_no_item(tmp_path: Path) -> None:
    # A stop signal to the whole process group reaches the engine's processes as soon as the worker: the engine
    # dies a moment before the worker is told to stop. Nothing is blamed or reloaded; the chunk goes back.
    album, sessions, job_id, (chunk_id,) = album_job(tmp_path, [(40 * i, 100, 150) for i in range(4)])
    gate = threading.Event()  # never set: the requests stay in the engine until it dies
    engines: list[ScriptedEngine] = []
    runner = scripted_runner([], engines, gate=gate)
    runner.load()
    ctx = scripted_context(sessions, runner, album, owner="t", revision=None)
    feeder = Feeder(ctx)
    assert feeder.add_chunk(chunk_id) is not None
    deadline = time.monotonic() + 30
    while runner.in_engine < 4:
        assert time.monotonic() < deadline, "the items never reached the engine"
        time.sleep(0.05)
    engines[0].dead = True  # the signal reached the engine first
    time.sleep(0.5)  # and the worker a moment later
    assert feeder.stop(drain_timeout_s=1) == [chunk_id]
    runner.close(abandon=True)
    assert len(engines) == 1, "the engine was reloaded on the way out"
    with sessions() as s:
        counts = job_store.item_counts(s, job_id=job_id)
        lease = s.scalars(select(Chunk.lease_owner).where(Chunk.id == chunk_id)).one()
    assert counts.get("failed", 0) == 0 and counts.get("succeeded", 0) == 0, counts
    assert lease is None, "the chunk was not handed back"

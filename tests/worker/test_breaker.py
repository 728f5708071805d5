"""The breaker with a scripted engine: a deployment that crashes on every request is not the items' fault.

``tests/support/scripted.py``'s ``Faults`` break every engine the runner loads (every image crashes it, as
vllm-ascend #12086 does on 310P, or its steps hang) until the test heals them. The breaker must open before the
album is burnt (no item failed, at most K+1 engine loads), say why on the job, and let the job finish once the
engine is healed; one poisoned photo among good ones still fails alone.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from api.job_views import job_out
from tests.support.albums import album_job
from tests.support.scripted import POISON, Faults, ScriptedEngine, scripted_context, scripted_runner
from vlbatch.db import engine_states, job_store
from vlbatch.db.models import EngineState, Item, Job
from worker.breaker import EngineBroken
from worker.context import WorkerContext
from worker.embedded import run_job
from worker.feeder import MAX_CRASHES_PER_ITEM, Feeder

pytestmark = pytest.mark.timeout(180)

K = 3  # VLBATCH_BREAKER_CRASHES' default


def _album(tmp_path: Path, colors: list[tuple[int, int, int]]) -> tuple[Path, Any, str]:
    """The photos each their own bytes (``distinct``): every one a separate item for the breaker to count."""
    album, sessions, job_id, _ = album_job(tmp_path, colors, distinct=True)
    return album, sessions, job_id


def _context(album: Path, sessions: Any, runner: Any, **settings: Any) -> WorkerContext:
    return scripted_context(sessions, runner, album, owner="t", revision=None, platform="cpu", **settings)


def _until(check: Callable[[], Any], what: str, timeout_s: float = 60) -> Any:
    deadline = time.monotonic() + timeout_s
    while not (got := check()):
        assert time.monotonic() < deadline, what
        time.sleep(0.02)
    return got


def _items(sessions: Any, job_id: str) -> list[Item]:
    with sessions() as s:
        return list(s.scalars(select(Item).where(Item.job_id == job_id).order_by(Item.seq)))


def test_an_engine_that_crashes_on_every_image_opens_the_breaker_and_the_job_finishes_once_healed(
    tmp_path: Path,
) -> None:
    # Every photo a poison, but not the canary's picture: the breaker in the feeder has to see it.
    album, sessions, job_id = _album(tmp_path, [POISON] * 12)
    faults = Faults()
    engines: list[ScriptedEngine] = []
    runner = scripted_runner([], engines, faults=faults)
    runner.load()
    # A back-off long enough to look at the open breaker before the first reload.
    ctx = _context(album, sessions, runner, breaker_backoff_s=4.0, breaker_backoff_max_s=4.0)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            run_job(ctx, job_id, sample_every_s=0.1, give_up=False)  # a worker that waits for the engine to heal
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()

    def stalled() -> str | None:
        with sessions() as s:
            return engine_states.stalled_reason(s, model="m")

    reason = _until(stalled, "the breaker never opened")
    loads = len(engines)
    assert loads <= K + 1, f"{loads} engine loads before the breaker opened"
    assert reason.startswith(f"the engine of worker t crashes on every item it runs ({K} in a row, each alone) since ")
    with sessions() as s:
        job = s.get(Job, job_id)
        assert job is not None
        shown = job_out(s, ctx.settings, job)
    assert shown.stalled == reason and shown.counts["failed"] == 0
    items = _items(sessions, job_id)
    # Nothing burnt: every item back to queued, no crash charged to any of them.
    assert {i.status for i in items} == {"queued"}, [i.status for i in items]
    assert all(i.crash_count == 0 for i in items)

    faults.poison_colours = []  # the operator fixes the engine
    thread.join(120)
    assert not thread.is_alive() and not errors, errors
    runner.close()
    items = _items(sessions, job_id)
    assert [i.status for i in items] == ["succeeded"] * 12
    assert all(i.crash_count == 0 and i.error_code is None for i in items)
    with sessions() as s:
        job = s.get(Job, job_id)
        assert job is not None
        assert job.status == "finished" and job_out(s, ctx.settings, job).stalled is None
        assert s.get(EngineState, "t") is None  # a worker that stops serving fine leaves no state behind


def test_an_embedded_run_on_an_engine_that_fails_its_canary_stops_with_the_reason_and_claims_nothing(
    tmp_path: Path,
) -> None:
    album, sessions, job_id = _album(tmp_path, [(40 * i % 256, 100, 150) for i in range(6)])
    engines: list[ScriptedEngine] = []
    runner = scripted_runner([], engines, faults=Faults(images=True))
    runner.load()
    ctx = _context(album, sessions, runner, breaker_backoff_s=0.1)
    with pytest.raises(EngineBroken) as err:
        run_job(ctx, job_id, sample_every_s=0.1)
    runner.close()
    assert err.value.code == "engine_canary_failed"
    assert "the engine crashes on an image request" in err.value.message
    assert "the items stay queued" in err.value.message
    assert len(engines) == 2  # the first load, and one reload after the back-off
    items = _items(sessions, job_id)
    assert [(i.status, i.attempts, i.crash_count) for i in items] == [("queued", 0, 0)] * 6  # never claimed
    with sessions() as s:
        broken = engine_states.open_breakers(s)
    assert [b.owner for b in broken] == ["t"]


def test_one_poisoned_photo_among_fifty_fails_alone_and_the_breaker_stays_closed(tmp_path: Path) -> None:
    colors = [POISON if i == 17 else (40 * i % 256, 100 + i, 150) for i in range(51)]
    album, sessions, job_id = _album(tmp_path, colors)
    engines: list[ScriptedEngine] = []
    runner = scripted_runner([], engines)
    runner.load()
    ctx = _context(album, sessions, runner)
    run_job(ctx, job_id, sample_every_s=0.1)
    runner.close()
    items = _items(sessions, job_id)
    failed = [i for i in items if i.status == "failed"]
    assert [i.seq for i in failed] == [17] and failed[0].error_code == "engine_crash"
    assert failed[0].crash_count == MAX_CRASHES_PER_ITEM
    assert sum(i.status == "succeeded" for i in items) == 50
    with sessions() as s:
        assert engine_states.open_breakers(s) == []


def test_past_the_restart_budget_the_breaker_opens_and_charges_nothing(tmp_path: Path) -> None:
    colors = [POISON if i == 1 else (40 * i % 256, 100, 150) for i in range(4)]
    album, sessions, job_id = _album(tmp_path, colors)
    engines: list[ScriptedEngine] = []
    runner = scripted_runner([], engines)
    runner.load()
    ctx = _context(album, sessions, runner, engine_loads_per_hour=1, breaker_backoff_s=60)
    feeder = Feeder(ctx)
    with sessions() as s:
        (chunk_id,) = job_store.chunks_of(s, job_id=job_id)
    assert feeder.add_chunk(chunk_id) is not None
    with sessions() as s:
        _until(lambda: engine_states.open_breakers(s), "the breaker never opened")
        (broken,) = engine_states.open_breakers(s)
    feeder.close()
    runner.close(abandon=True)
    assert "loaded 1 times in the last hour" in broken.reason
    assert len(engines) == 1  # no load past the budget
    items = _items(sessions, job_id)
    assert items[1].status == "queued"  # the poisoned one: the budget, not the item, stopped it
    assert all(i.status in ("queued", "succeeded") and i.crash_count == 0 for i in items), items


def test_a_hung_engine_is_restarted_and_counts_toward_the_breaker(tmp_path: Path) -> None:
    album, sessions, job_id = _album(tmp_path, [(40 * i % 256, 100, 150) for i in range(6)])
    faults = Faults(hang=True)
    engines: list[ScriptedEngine] = []
    runner = scripted_runner([], engines, faults=faults)
    runner.load()
    runner.watchdog_interval_s = 0.05
    ctx = _context(album, sessions, runner, engine_stall_s=0.3, breaker_backoff_s=60)
    feeder = Feeder(ctx)
    with sessions() as s:
        chunk_ids = job_store.chunks_of(s, job_id=job_id)
    for cid in chunk_ids:
        assert feeder.add_chunk(cid) is not None
    with sessions() as s:
        _until(lambda: engine_states.open_breakers(s), "the breaker never opened")
        (broken,) = engine_states.open_breakers(s)
    assert broken.reason == f"crashes on every item it runs ({K} in a row, each alone)"
    # Each hang was caught and the engine restarted: once per hang charged to an item run alone (K of them), and once
    # more when the first hang held several requests (admitted together before its first step, as a loaded host
    # prepares several photos before the engine's loop takes the first): that crash is no one's, and its requests
    # are then run alone.
    assert 2 <= len(engines) <= K + 2
    faults.hang = False  # lets the stuck steps return
    feeder.close()
    runner.close(abandon=True)
    assert all(i.status == "queued" and i.crash_count == 0 for i in _items(sessions, job_id))

"""engine.runtime.occupancy: requests per engine step, from the engine's scheduler or counted by the runner."""

from __future__ import annotations

from types import SimpleNamespace

from engine.runtime.occupancy import Occupancy, attach


def test_the_mean_is_over_the_steps_between_two_snapshots() -> None:
    occ = Occupancy(capacity=8)
    assert occ.snapshot().mean_running_since() is None  # no step yet: no mean, not zero
    occ.add(running=8, waiting=3)
    earlier = occ.snapshot()
    occ.add(running=2, waiting=0)
    occ.add(running=4, waiting=1)
    now = occ.snapshot()
    assert now.mean_running_since(earlier) == 3.0
    assert now.mean_running_since() == 14 / 3
    assert occ.snapshot().mean_running_since(now) is None
    assert (now.waiting_sum, now.capacity, now.source) == (4, 8, "runner")


def test_an_engine_with_stat_loggers_reports_its_schedulers_counts() -> None:
    occ = Occupancy(capacity=4)
    loggers: list = []
    engine = SimpleNamespace(logger_manager=SimpleNamespace(stat_loggers=loggers))
    assert attach(engine, occ) is True and len(loggers) == 1
    recorder = loggers[0]
    recorder.record(SimpleNamespace(num_running_reqs=3, num_waiting_reqs=5), None)
    recorder.record(None, None)  # a step without scheduler statistics counts nothing
    snap = occ.snapshot()
    assert (snap.steps, snap.running_sum, snap.waiting_sum, snap.source) == (1, 3, 5, "scheduler")


def test_an_engine_without_stat_loggers_is_left_to_the_runners_count() -> None:
    occ = Occupancy(capacity=4)
    assert attach(SimpleNamespace(), occ) is False
    assert occ.snapshot().source == "runner"

"""Engine occupancy: how many requests ran in each engine step, as the engine's scheduler reports it.

vLLM sends its scheduler's statistics with each step's outputs when statistics are on; a recorder
added to its stat loggers counts running and waiting requests per step. An engine that reports
nothing (a scripted stand-in) is counted by the runner from the requests it has in the engine.
Counters only grow; a reader takes two snapshots and divides the differences.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class OccupancySnapshot:
    steps: int
    running_sum: int
    waiting_sum: int
    capacity: int  # max_num_seqs
    source: str  # "scheduler" (the engine's own count) or "runner" (requests inside the engine, capped)

    def mean_running_since(self, earlier: OccupancySnapshot | None = None) -> float | None:
        steps = self.steps - (earlier.steps if earlier else 0)
        if steps <= 0:
            return None
        return (self.running_sum - (earlier.running_sum if earlier else 0)) / steps


class Occupancy:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._lock = threading.Lock()
        self._steps = 0
        self._running = 0
        self._waiting = 0
        self.source = "runner"

    def add(self, running: int, waiting: int) -> None:
        with self._lock:
            self._steps += 1
            self._running += running
            self._waiting += waiting

    def snapshot(self) -> OccupancySnapshot:
        with self._lock:
            return OccupancySnapshot(self._steps, self._running, self._waiting, self.capacity, self.source)


class SchedulerRecorder:
    """A vLLM stat logger (duck-typed to its interface) that feeds ``Occupancy`` from scheduler stats."""

    def __init__(self, occupancy: Occupancy) -> None:
        self.occupancy = occupancy
        occupancy.source = "scheduler"

    def record(
        self, scheduler_stats: Any, iteration_stats: Any, mm_cache_stats: Any = None, engine_idx: int = 0
    ) -> None:
        if scheduler_stats is not None:
            self.occupancy.add(int(scheduler_stats.num_running_reqs), int(scheduler_stats.num_waiting_reqs))

    def log(self) -> None:
        pass

    def log_engine_initialized(self) -> None:
        pass

    def record_sleep_state(self, *args: Any, **kwargs: Any) -> None:
        pass

    def record_admission_rejection(self, reason: str) -> None:
        pass


def attach(engine: Any, occupancy: Occupancy) -> bool:
    """Add a recorder to a vLLM ``LLMEngine`` built with statistics on; False when it has no stat loggers."""
    manager = getattr(engine, "logger_manager", None)
    loggers = getattr(manager, "stat_loggers", None)
    if not isinstance(loggers, list):
        return False
    loggers.append(SchedulerRecorder(occupancy))
    return True

"""Device telemetry in the engine worker, and the thermal gate that holds back new chunks on a hot chip.

A monitor thread samples the worker's chips (``ASCEND_RT_VISIBLE_DEVICES``; every chip on the host when
that is unset) every ``telemetry_interval_s``, feeds the gate, and stores
the readings against the jobs whose chunks are running. Before a task claims its chunk it waits
(bounded by ``thermal_max_wait_s``) while the gate is closed; nothing is claimed meanwhile, so the chunk
stays queued in the DB. A wait that runs out is an answer, not an error: ``wait_until_cool`` returns False,
the task leaves the chunk unclaimed and the reconciler can hand it to a cooler worker.

The gate closes when any chip reaches ``thermal_limit_c`` and opens again only when every chip is at or
below ``thermal_resume_c``: the gap stops it flapping around one temperature. No readings (CPU, no NPU,
npu-smi failing) never close it.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

from sqlalchemy.orm import Session, sessionmaker

from engine.telemetry import DeviceReading, Sampler, make_sampler
from vlbatch.db import job_store
from vlbatch.db.models import DeviceSample
from vlbatch.settings import Settings

log = logging.getLogger(__name__)


class ThermalGate:
    """Open/closed with hysteresis, per chip. Thread-safe; ``wait_open`` blocks until open or timeout."""

    def __init__(self, limit_c: float, resume_c: float) -> None:
        if resume_c >= limit_c:
            raise ValueError(f"resume_c={resume_c} must be below limit_c={limit_c}")
        self.limit_c = limit_c
        self.resume_c = resume_c
        self._hot: dict[int, float] = {}
        self._released = False
        self._cond = threading.Condition()

    def update(self, readings: Iterable[DeviceReading]) -> bool:
        """Apply one round of readings; returns whether the gate is open afterwards."""
        with self._cond:
            for r in readings:
                if r.temp_c is None:
                    continue
                if r.temp_c >= self.limit_c:
                    if r.device_id not in self._hot:
                        log.warning(
                            "chip %d at %.0f C reached the limit %.0f C: no new chunks until it is at %.0f C",
                            r.device_id,
                            r.temp_c,
                            self.limit_c,
                            self.resume_c,
                        )
                    self._hot[r.device_id] = r.temp_c
                elif r.device_id in self._hot:
                    if r.temp_c <= self.resume_c:
                        del self._hot[r.device_id]
                        log.info("chip %d cooled to %.0f C: claiming again", r.device_id, r.temp_c)
                    else:
                        self._hot[r.device_id] = r.temp_c
            self._cond.notify_all()
            return not self._hot

    @property
    def is_open(self) -> bool:
        with self._cond:
            return not self._hot

    def hot(self) -> dict[int, float]:
        with self._cond:
            return dict(self._hot)

    def wait_open(self, timeout_s: float) -> bool:
        """True once every chip is cool; False on timeout or after :meth:`release_waiters`."""
        with self._cond:
            self._cond.wait_for(lambda: not self._hot or self._released, timeout=timeout_s)
            return not self._hot

    def release_waiters(self) -> None:
        """Wake every wait, now and later, with the gate's current answer: a worker that is shutting down
        must not sit out a long thermal wait (the drain is bounded)."""
        with self._cond:
            self._released = True
            self._cond.notify_all()


def record_samples(
    session: Session, *, jobs: dict[str, int | None], worker: str, readings: list[DeviceReading], at: datetime
) -> int:
    """Store one round of readings once per running job (``jobs`` maps job id to one of its chunk ids)."""
    rows = [
        DeviceSample(
            job_id=job_id,
            chunk_id=chunk_id,
            worker=worker,
            device_id=r.device_id,
            npu_id=r.npu_id,
            temp_c=r.temp_c,
            power_w=r.power_w,
            memory_used_mb=r.memory_used_mb,
            memory_total_mb=r.memory_total_mb,
            aicore_pct=r.aicore_pct,
            sampled_at=at,
        )
        for job_id, chunk_id in jobs.items()
        for r in readings
    ]
    session.add_all(rows)
    return len(rows)


class DeviceMonitor:
    """Samples on a daemon thread, feeds the gate and stores samples for the chunks registered as running."""

    def __init__(self, settings: Settings, sessions: sessionmaker[Session], sampler: Sampler, worker: str) -> None:
        self.settings = settings
        self.sessions = sessions
        self.sampler = sampler
        self.worker = worker
        self.gate = ThermalGate(settings.thermal.thermal_limit_c, settings.thermal.thermal_resume_c)
        self.latest: list[DeviceReading] = []
        self._running: dict[int, str] = {}  # chunk id -> job id
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self.tick()  # the gate knows the temperatures before the first chunk is claimed
        self._thread = threading.Thread(target=self._loop, name="device-telemetry", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def _loop(self) -> None:
        while not self._stop.wait(self.settings.telemetry.telemetry_interval_s):
            try:
                self.tick()
            except Exception:  # a DB hiccup must not end telemetry for the life of the worker
                log.exception("device telemetry round failed (worker %s)", self.worker)

    def tick(self) -> list[DeviceReading]:
        readings = self.sampler.sample()
        self.latest = readings
        self.gate.update(readings)
        with self._lock:
            jobs: dict[str, int | None] = {}
            for chunk_id, job_id in self._running.items():
                jobs.setdefault(job_id, chunk_id)
        if readings and jobs:
            with self.sessions() as s:
                record_samples(s, jobs=jobs, worker=self.worker, readings=readings, at=datetime.now(UTC))
                s.commit()
        return readings

    @contextmanager
    def running(self, chunk_id: int) -> Iterator[None]:
        with self.sessions() as s:
            job_id = job_store.job_of_chunk(s, chunk_id=chunk_id)
        if job_id is not None:
            with self._lock:
                self._running[chunk_id] = job_id
        try:
            yield
        finally:
            with self._lock:
                self._running.pop(chunk_id, None)

    def wait_until_cool(self, chunk_id: int) -> bool:
        """Whether the chips are cool enough to claim ``chunk_id``, waiting up to ``thermal_max_wait_s``."""
        if self.gate.is_open:
            return True
        limit = self.settings.thermal.thermal_max_wait_s
        log.warning(
            "chunk %d waits (up to %.0fs) before claiming: chips %s above %.0f C, resume at %.0f C",
            chunk_id,
            limit,
            self.gate.hot(),
            self.settings.thermal.thermal_limit_c,
            self.settings.thermal.thermal_resume_c,
        )
        start = time.monotonic()
        if not self.gate.wait_open(limit):
            log.error(
                "chunk %d not claimed: chips %s stayed above %.0f C for %.0fs; check cooling (the reconciler "
                "re-enqueues it)",
                chunk_id,
                self.gate.hot(),
                self.settings.thermal.thermal_resume_c,
                limit,
            )
            return False
        log.info("chunk %d claims after waiting %.0fs for chips to cool", chunk_id, time.monotonic() - start)
        return True


_monitor: DeviceMonitor | None = None
_monitor_lock = threading.Lock()


def release_waiters() -> None:
    """Shutdown: tasks waiting for hot chips to cool return at once (their chunks go back to the queue)."""
    with _monitor_lock:
        if _monitor is not None:
            _monitor.gate.release_waiters()


def get_monitor(settings: Settings, sessions: sessionmaker[Session]) -> DeviceMonitor:
    """The process's one monitor, started on first use."""
    global _monitor
    with _monitor_lock:
        if _monitor is None:
            sampler = make_sampler(
                settings.devices.visible_devices, binary=settings.devices.npu_smi, platform=settings.devices.platform
            )
            _monitor = DeviceMonitor(settings, sessions, sampler, f"{socket.gethostname()}:{os.getpid()}")
            _monitor.start()
        return _monitor

"""Energy per job: the worker's chips' power, integrated over each interval and split between the jobs it
worked on in that interval in proportion to their tokens (prompt + output of the items answered).

:class:`EnergyLedger` is pure arithmetic: tokens are added as answers arrive, ``close`` takes the next
power sample and returns each job's share of the interval's watt-hours. Instantaneous samples (npu-smi,
nvidia-smi) are integrated by the trapezoid rule between two samples; an energy counter's average (NVML,
RAPL) times the interval is exact. An interval without two known samples is unknown: its tokens are booked
as unmetered, never priced at a guess. Energy of an interval in which no job had tokens (the engine idle)
belongs to no job and is reported as idle.

:class:`EnergyBooker` runs the ledger on a thread of the feeder, reading the platform's power meter every
``energy_interval_s`` and adding the shares to ``jobs.energy_wh`` (and ``jobs.energy_unmetered_tokens``).
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from sqlalchemy.orm import Session, sessionmaker

from engine.platforms import current_platform
from engine.platforms.power import PowerMeter, PowerSample
from vlbatch.db.energy import add_job_energy
from vlbatch.settings import Settings

log = logging.getLogger(__name__)

JOULES_PER_WH = 3600.0


@dataclass(frozen=True)
class IntervalShare:
    """One interval's booking: watt-hours per job, tokens whose energy is unknown, energy no job used."""

    wh: Mapping[str, float] = field(default_factory=dict)
    unmetered_tokens: Mapping[str, int] = field(default_factory=dict)
    idle_wh: float = 0.0
    seconds: float = 0.0


def interval_joules(previous: PowerSample, current: PowerSample) -> float:
    """Energy between two samples: the counter's mean times the interval, or the trapezoid of two readings."""
    seconds = current.at - previous.at
    if seconds <= 0:
        return 0.0
    if current.average:
        return current.watts * seconds
    return (previous.watts + current.watts) / 2 * seconds


def split(joules: float, tokens: Mapping[str, int]) -> dict[str, float]:
    """``joules`` as watt-hours per job, in proportion to each job's tokens."""
    total = sum(tokens.values())
    if total <= 0:
        return {}
    return {job: joules * n / total / JOULES_PER_WH for job, n in tokens.items() if n > 0}


class EnergyLedger:
    """Tokens per job since the last sample, and the last sample. Thread-safe."""

    def __init__(self) -> None:
        self._tokens: dict[str, int] = defaultdict(int)
        self._last: PowerSample | None = None
        self._lock = threading.Lock()

    def add_tokens(self, job_id: str, tokens: int) -> None:
        if tokens > 0:
            with self._lock:
                self._tokens[job_id] += tokens

    def close(self, sample: PowerSample | None) -> IntervalShare:
        """End the interval at ``sample`` (None: power unknown now) and book it."""
        with self._lock:
            tokens, self._tokens = dict(self._tokens), defaultdict(int)
            previous, self._last = self._last, sample
        if sample is None or previous is None:  # an end of the interval is unknown: so is its energy
            return IntervalShare(unmetered_tokens={j: n for j, n in tokens.items() if n > 0})
        joules = interval_joules(previous, sample)
        shares = split(joules, tokens)
        idle = 0.0 if shares else joules / JOULES_PER_WH
        return IntervalShare(wh=shares, idle_wh=idle, seconds=sample.at - previous.at)


class EnergyBooker:
    """Reads ``meter`` every ``interval_s`` on a daemon thread and books each interval's shares in the DB."""

    def __init__(
        self,
        meter: PowerMeter,
        sessions: sessionmaker[Session],
        *,
        interval_s: float,
        worker: str,
        on_share: Callable[[IntervalShare], None] | None = None,
    ) -> None:
        self.meter = meter
        self.ledger = EnergyLedger()
        self._sessions = sessions
        self._interval_s = interval_s
        self._worker = worker
        self._on_share = on_share
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="energy", daemon=True)

    def start(self) -> None:
        self.ledger.close(self._read())  # the first sample opens the first interval
        self._thread.start()
        log.info("energy per job from %s every %.0fs (worker %s)", self.meter.source, self._interval_s, self._worker)

    def stop(self) -> None:
        """Book the last partial interval and stop."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)
        self.tick()

    def tick(self) -> IntervalShare:
        share = self.ledger.close(self._read())
        if share.wh or share.unmetered_tokens:
            try:
                with self._sessions() as s:
                    add_job_energy(s, wh=share.wh, unmetered_tokens=share.unmetered_tokens)
                    s.commit()
            except Exception:
                log.exception("energy of %d jobs not stored (worker %s)", len(share.wh), self._worker)
        if self._on_share is not None:
            self._on_share(share)
        return share

    def _read(self) -> PowerSample | None:
        try:
            return self.meter.read()
        except Exception:  # a meter must never stop the worker; the interval is unknown
            log.exception("power read failed (%s)", self.meter.source)
            return None

    def _loop(self) -> None:
        while not self._stop.wait(self._interval_s):
            self.tick()


def energy_booker(settings: Settings, sessions: sessionmaker[Session], *, worker: str) -> EnergyBooker:
    """The booker of this worker's chips, through its platform's power meter (unknown where there is none)."""
    platform = current_platform(settings.devices.platform, npu_smi=settings.devices.npu_smi)
    meter = platform.power_meter(settings.devices.visible_devices)
    return EnergyBooker(meter, sessions, interval_s=settings.telemetry.energy_interval_s, worker=worker)

"""Power meters: what a worker's chips draw, from the source its platform owns, or "unknown" (never a guess).

- :class:`ReadingsPower` sums this worker's share of a telemetry sampler's ``power_w`` (npu-smi on Ascend,
  nvidia-smi on NVIDIA): instantaneous watts.
- :class:`NvmlPower` reads NVML's energy counter (``nvmlDeviceGetTotalEnergyConsumption``, millijoules since
  the driver loaded), so an interval's energy is exact, not a sample. ``pynvml`` is imported on first read.
- :class:`RaplPower` reads the CPU packages' RAPL counters under ``/sys/class/powercap`` (microjoules, wrapping
  at ``max_energy_range_uj``): the host's CPU build.

A meter returns ``None`` when it cannot say (no power field, a failed read, the first counter read): the
interval is then "unknown" and its tokens are counted as unmetered rather than priced at a made-up figure.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

log = logging.getLogger(__name__)

POWERCAP = Path("/sys/class/powercap")


@dataclass(frozen=True)
class PowerSample:
    """Watts at ``at`` (monotonic seconds). ``average`` means the figure is the mean since the previous
    sample (an energy counter's difference), not an instantaneous reading."""

    at: float
    watts: float
    average: bool = False


class PowerMeter(Protocol):
    source: str

    def read(self) -> PowerSample | None: ...


class ChipSampler(Protocol):
    """A telemetry sampler (``reports.Sampler``): readings that carry ``power_w`` (watts or None)."""

    def sample(self) -> Sequence[Any]: ...


class UnknownPower:
    """No power source on this host: every interval's energy is unknown."""

    source = "unknown"

    def read(self) -> PowerSample | None:
        return None


class ReadingsPower:
    """This worker's share of the chips' ``power_w`` from a telemetry sampler of every chip on the host.

    A chip row with its own figure counts as it is. A figure shared by every chip of one card (a 310P card
    reports its power only for the card, and the sampler gives it to each chip) is split equally between the
    card's chips, so two workers that own one chip each of a card book half of it each, not all of it twice.
    Unknown when any of this worker's chips has no figure.
    """

    def __init__(
        self,
        sampler: ChipSampler,
        *,
        devices: Sequence[int] | None,
        source: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.sampler = sampler
        self.devices = set(devices) if devices is not None else None
        self.source = source
        self._clock = clock

    def read(self) -> PowerSample | None:
        readings = self.sampler.sample()
        cards: dict[object, list[Any]] = {}
        for r in readings:
            cards.setdefault(r.npu_id if r.npu_id is not None else ("chip", r.device_id), []).append(r)
        total = 0.0
        mine = 0
        for chips in cards.values():
            figures = {r.power_w for r in chips}
            shared = len(chips) > 1 and len(figures) == 1
            for r in chips:
                if self.devices is not None and r.device_id not in self.devices:
                    continue
                if r.power_w is None:
                    return None
                mine += 1
                total += r.power_w / len(chips) if shared else r.power_w
        if not mine:
            return None
        return PowerSample(self._clock(), total)


class CounterPower:
    """Average watts between two reads of cumulative energy counters (joules), one per chip or package.

    ``read_joules`` returns each counter's value and its wrap range (joules, 0 when it does not wrap); a
    counter that went backwards without a wrap range (driver reload) makes that interval unknown.
    """

    def __init__(
        self,
        read_joules: Callable[[], list[tuple[float, float]] | None],
        *,
        source: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._read = read_joules
        self.source = source
        self._clock = clock
        self._last: tuple[float, list[tuple[float, float]]] | None = None

    def read(self) -> PowerSample | None:
        now = self._clock()
        counters = self._read()
        last, self._last = self._last, (now, counters) if counters else None
        if not counters or last is None or len(last[1]) != len(counters) or now <= last[0]:
            return None
        joules = 0.0
        for (before, _), (after, wrap) in zip(last[1], counters, strict=True):
            delta = after - before
            if delta < 0:
                if wrap <= 0:
                    return None
                delta += wrap
            joules += delta
        return PowerSample(now, joules / (now - last[0]), average=True)


def rapl_zones(root: Path = POWERCAP) -> list[Path]:
    """Top-level RAPL package zones (``intel-rapl:N``; their ``:N:M`` subzones are inside the package)."""
    if not root.is_dir():
        return []
    return sorted(p for p in root.glob("intel-rapl:*") if p.name.count(":") == 1 and (p / "energy_uj").is_file())


def rapl_meter(root: Path = POWERCAP, *, clock: Callable[[], float] = time.monotonic) -> PowerMeter:
    """RAPL over the host's CPU packages, or unknown when the host exposes none (or they are unreadable)."""
    zones = rapl_zones(root)

    def read() -> list[tuple[float, float]] | None:
        try:
            out = []
            for z in zones:
                wrap_file = z / "max_energy_range_uj"
                wrap = int(wrap_file.read_text()) if wrap_file.is_file() else 0
                out.append((int((z / "energy_uj").read_text()) / 1e6, wrap / 1e6))
            return out
        except (OSError, ValueError) as e:  # energy_uj is root-only on many kernels
            log.debug("RAPL counters unreadable: %s", e)
            return None

    if not zones or read() is None:
        return UnknownPower()
    return CounterPower(read, source="rapl", clock=clock)


def nvml_meter(
    devices: Sequence[int] | None, *, nvml: Any = None, clock: Callable[[], float] = time.monotonic
) -> PowerMeter | None:
    """NVML's energy counters of ``devices`` (all GPUs when None); None when pynvml or the driver is absent."""
    try:
        if nvml is None:
            import pynvml as nvml  # type: ignore[no-redef]
        nvml.nvmlInit()
        ids = list(devices) if devices is not None else list(range(nvml.nvmlDeviceGetCount()))
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in ids]
    except Exception as e:  # ImportError, NVMLError: fall back to nvidia-smi's power.draw
        log.debug("NVML unavailable: %s", e)
        return None

    def read() -> list[tuple[float, float]] | None:
        try:
            return [(nvml.nvmlDeviceGetTotalEnergyConsumption(h) / 1000.0, 0.0) for h in handles]
        except Exception as e:  # an NVMLError: the interval is unknown
            log.debug("NVML energy read failed: %s", e)
            return None

    return CounterPower(read, source="nvml", clock=clock)

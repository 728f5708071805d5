"""What a platform reports, as plain data: chips and their inventory, findings, doctor lines, op results and
device readings, so no caller sees a vendor type. Importing it touches no device."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

Level = Literal["error", "warning"]
Status = Literal["ok", "info", "warn", "fail"]
# Health words that mean "do not run an engine here" (npu-smi's Alarm/Critical, nvidia-smi's lost GPU).
BAD_HEALTH = frozenset({"alarm", "critical", "unknown", "lost", "error"})


@dataclass(frozen=True)
class Chip:
    """One accelerator chip present on this host: what a single engine rank owns.

    ``device_id`` is the id the platform's visibility variable selects (npu-smi's Device column, the GPU
    index); ``npu_id`` is the card (npu-smi's NPU id; the GPU index on CUDA) and ``chip_id`` the chip on it.
    """

    device_id: int
    npu_id: int
    chip_id: int
    name: str
    health: str
    bus_id: str
    temp_c: int | None
    power_w: float | None
    memory_used_mb: int
    memory_total_mb: int
    process_mb: int = 0  # memory held by the processes the tool lists on this chip
    pids: tuple[int, ...] = ()
    place: str = ""  # how the label names where it sits; default "NPU <npu_id> chip <chip_id>"

    @property
    def free_mb(self) -> int:
        return self.memory_total_mb - self.memory_used_mb

    @property
    def healthy(self) -> bool:
        return self.health.lower() == "ok"

    @property
    def label(self) -> str:
        return f"chip {self.device_id} ({self.place or f'NPU {self.npu_id} chip {self.chip_id}'}, {self.bus_id})"


@dataclass(frozen=True)
class Inventory:
    driver_version: str
    chips: list[Chip]

    @property
    def device_ids(self) -> list[int]:
        return sorted(c.device_id for c in self.chips)

    def cards(self) -> dict[tuple[int, str], list[Chip]]:
        """Chips grouped by card: the two chips of a 300I Duo share NPU id and Bus-Id."""
        out: dict[tuple[int, str], list[Chip]] = defaultdict(list)
        for c in self.chips:
            out[(c.npu_id, c.bus_id)].append(c)
        return dict(out)


@dataclass(frozen=True)
class Finding:
    level: Level
    message: str  # says what is wrong and the exact fix
    kind: str = ""  # visible, missing, outside, size, shared, health, busy, unused, or the tool that failed


@dataclass(frozen=True)
class Check:
    """One line of ``vlbatch doctor``."""

    status: Status
    message: str


@dataclass(frozen=True)
class OpResult:
    """A tiny operation on one chip, as the doctor runs it."""

    index: int  # the in-process device index (npu:N, cuda:N), after the visibility variable renumbers them
    error: str | None
    free_mb: int | None = None
    total_mb: int | None = None


@dataclass(frozen=True)
class DeviceReading:
    device_id: int
    npu_id: int | None = None
    temp_c: float | None = None
    power_w: float | None = None
    memory_used_mb: int | None = None
    memory_total_mb: int | None = None
    aicore_pct: float | None = None


class Sampler(Protocol):
    def sample(self) -> list[DeviceReading]: ...


def chip_readings(
    chips: Iterable[Chip], devices: set[int] | None, *, power: Mapping[int, float] | None = None
) -> list[DeviceReading]:
    """The readings of the ``chips`` this worker holds (``devices``; None: all); a chip with no power of its own
    takes its card's from ``power`` (by NPU id) when given."""
    return [
        DeviceReading(
            device_id=c.device_id,
            npu_id=c.npu_id,
            temp_c=float(c.temp_c) if c.temp_c is not None else None,
            power_w=c.power_w if c.power_w is not None or power is None else power.get(c.npu_id),
            memory_used_mb=c.memory_used_mb,
            memory_total_mb=c.memory_total_mb,
        )
        for c in chips
        if devices is None or c.device_id in devices
    ]


class FailureStreak:
    """A sampler's tool failing: logged once per streak of failures, not every interval."""

    def __init__(self, log: logging.Logger) -> None:
        self._log, self._failing = log, False

    def failed(self, exc: Exception) -> list[DeviceReading]:
        if not self._failing:
            self._log.warning("device telemetry unavailable: %s", exc)
        self._failing = True
        return []

    def ended(self) -> None:
        self._failing = False


class NullSampler:
    """CPU, or no tool to read: nothing to read, so the thermal gate stays open."""

    def sample(self) -> list[DeviceReading]:
        return []


def _no_dist(name: str) -> str | None:
    return None


def _no_module(name: str) -> str | None:
    return None


@dataclass
class DoctorContext:
    """What ``vlbatch doctor`` hands a platform: the settings it checks and the host probes (tests replace them)."""

    visible: Sequence[int] | None = None
    instances: Mapping[str, Sequence[int]] = field(default_factory=dict)
    tensor_parallel_size: int | None = None
    dtype: str | None = None  # the engine's configured dtype; None when the engine config is invalid
    # The engine's graph mode: "eager" (enforce_eager), its compilation_config's cudagraph_mode, or None when it
    # leaves the choice to the platform (or the engine config is invalid).
    graph_mode: str | None = None
    thermal_limit_c: float = 95.0
    toolkit_home: Path | None = None
    required: bool = False  # an accelerator is expected here (devices configured, vendor packages installed)
    root: Path = Path("/")
    dist_version: Callable[[str], str | None] = _no_dist
    module_origin: Callable[[str], str | None] = _no_module  # where an importable module comes from, else None
    discover: Callable[[], Inventory] | None = None  # None: the platform's own discover()
    tiny_op: Callable[[], tuple[list[OpResult], str | None]] | None = None  # None: the platform's own


def ids_text(ids: Iterable[int]) -> str:
    return ",".join(str(i) for i in sorted(ids)) or "none"

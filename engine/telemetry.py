"""Chip readings for the worker: temperature, power and memory, from npu-smi; nothing on CPU hosts.

One ``npu-smi info`` call gives every chip's temperature and memory. 310P tables print Power as ``NA``,
so the card's power comes from ``npu-smi info -t common -i <NPU id>`` (its mcu block), once per card.
A sampler never raises: a failed sample is logged and yields no readings, which leaves the thermal
gate as it was.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from engine import discovery, npu_smi

log = logging.getLogger(__name__)


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


class NullSampler:
    """CPU or no NPU: nothing to read, so the thermal gate stays open."""

    def sample(self) -> list[DeviceReading]:
        return []


class NpuSmiSampler:
    """Reads the chips this worker owns (all chips when ``devices`` is None) through npu-smi."""

    def __init__(
        self, devices: Sequence[int] | None, *, binary: str = "npu-smi", timeout_s: float = 10.0, power: bool = True
    ) -> None:
        self.devices = set(devices) if devices is not None else None
        self.binary = binary
        self.timeout_s = timeout_s
        self.power = power
        self._failing = False

    def sample(self) -> list[DeviceReading]:
        try:
            info = npu_smi.parse_info(npu_smi.run(["info"], binary=self.binary, timeout_s=self.timeout_s))
            chips = discovery.inventory(info).chips
            card_power = self._card_power({c.npu_id for c in chips if c.power_w is None and self._mine(c)})
        except npu_smi.NpuSmiError as e:
            if not self._failing:  # once per failure streak, not every interval
                log.warning("device telemetry unavailable: %s", e)
            self._failing = True
            return []
        self._failing = False
        return [
            DeviceReading(
                device_id=c.device_id,
                npu_id=c.npu_id,
                temp_c=float(c.temp_c) if c.temp_c is not None else None,
                power_w=c.power_w if c.power_w is not None else card_power.get(c.npu_id),
                memory_used_mb=c.memory_used_mb,
                memory_total_mb=c.memory_total_mb,
            )
            for c in chips
            if self._mine(c)
        ]

    def _mine(self, chip: discovery.Chip) -> bool:
        return self.devices is None or chip.device_id in self.devices

    def _card_power(self, npu_ids: set[int]) -> dict[int, float]:
        out: dict[int, float] = {}
        if not self.power:
            return out
        for npu in sorted(npu_ids):
            try:
                text = npu_smi.run(
                    ["info", "-t", "common", "-i", str(npu)], binary=self.binary, timeout_s=self.timeout_s
                )
                watts = npu_smi.parse_card_report(text).power_w
            except npu_smi.NpuSmiError as e:
                log.debug("no power reading for NPU %d: %s", npu, e)
                continue
            if watts is not None:
                out[npu] = watts
        return out


def make_sampler(devices: Sequence[int] | None, *, binary: str = "npu-smi") -> Sampler:
    """npu-smi when it is installed, else the null sampler (CPU builds, hosts without an NPU)."""
    if shutil.which(binary) is None:
        log.info("no %s on this host: device telemetry off, thermal gate always open", binary)
        return NullSampler()
    return NpuSmiSampler(devices, binary=binary)

"""Chip readings for the worker (temperature, power, memory) from the platform's telemetry source: npu-smi on
Ascend, nvidia-smi on CUDA, nothing on CPU. A sampler never raises: a failed sample is logged and yields no
readings, which leaves the thermal gate as it was.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from engine.platforms import current_platform
from engine.platforms.ascend import NpuSmiSampler
from engine.platforms.interface import Platform
from engine.platforms.reports import DeviceReading, NullSampler, Sampler

log = logging.getLogger(__name__)

__all__ = ["DeviceReading", "NpuSmiSampler", "NullSampler", "Sampler", "make_sampler"]


def make_sampler(
    devices: Sequence[int] | None, *, binary: str = "npu-smi", platform: str | Platform | None = None
) -> Sampler:
    """The sampler of ``platform`` (a name, an instance, or None to detect it) for ``devices`` (None: all).
    A host with no tool to read gets the null sampler, and the thermal gate stays open."""
    p = platform if isinstance(platform, Platform) else current_platform(platform, npu_smi=binary)
    sampler = p.sampler(devices)
    if isinstance(sampler, NullSampler):
        log.info("no device telemetry on the %s platform: thermal gate always open", p.name)
    return sampler

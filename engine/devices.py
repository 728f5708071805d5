"""The device model: chips and cards with memory, bandwidth, throughput and power, read from ``device_specs.json``.

Pure data, no device access. Every figure carries its kind (data sheet, derived, field report, third party,
unverified) and its source, so a plan can say which of its inputs are vendor numbers and which are not.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any, Literal

FigureKind = Literal["datasheet", "derived", "field", "third_party", "unverified"]
Platform = Literal["ascend-310p", "ascend-910b", "cuda"]
MIB = 1024**2


@dataclass(frozen=True)
class Figure:
    """One number with where it came from."""

    value: float
    kind: FigureKind
    source: str


@dataclass(frozen=True)
class Chip:
    """One accelerator chip: what a single engine rank owns."""

    key: str
    vendor: str
    platform: Platform
    memory_gb: Figure
    memory_visible_mib: Figure
    bandwidth_gbs: Figure
    fp16_tflops: Figure
    int8_tops: Figure
    bf16: bool
    quantizations: tuple[str, ...]
    visible_env: str

    @property
    def memory_bytes(self) -> int:
        """The total the runtime reports for this chip (what gpu_memory_utilization multiplies)."""
        return int(self.memory_visible_mib.value) * MIB

    @property
    def bandwidth_bytes_s(self) -> float:
        return self.bandwidth_gbs.value * 1e9

    def flops(self, *, int8: bool) -> float:
        """Peak dense operations per second for fp16 matmuls, or int8 ones when activations are quantized too."""
        return (self.int8_tops.value if int8 else self.fp16_tflops.value) * 1e12

    def figures(self) -> dict[str, Figure]:
        return {
            "memory_gb": self.memory_gb,
            "memory_visible_mib": self.memory_visible_mib,
            "bandwidth_gbs": self.bandwidth_gbs,
            "fp16_tflops": self.fp16_tflops,
            "int8_tops": self.int8_tops,
        }


@dataclass(frozen=True)
class Card:
    """A product you buy: one or more chips behind one PCIe slot (or a server, for the 800T A2)."""

    key: str
    chip: Chip
    chips_per_card: int
    power_w: Figure
    cooling: str
    interconnect: str


def _figure(raw: dict[str, Any]) -> Figure:
    return Figure(value=float(raw["value"]), kind=raw["kind"], source=str(raw["source"]))


@lru_cache(maxsize=1)
def _load() -> tuple[dict[str, Chip], dict[str, Card]]:
    text = resources.files("engine").joinpath("device_specs.json").read_text(encoding="utf-8")
    data = json.loads(text)
    chips: dict[str, Chip] = {}
    for key, c in data["chips"].items():
        chips[key] = Chip(
            key=key,
            vendor=c["vendor"],
            platform=c["platform"],
            memory_gb=_figure(c["memory_gb"]),
            memory_visible_mib=_figure(c["memory_visible_mib"]),
            bandwidth_gbs=_figure(c["bandwidth_gbs"]),
            fp16_tflops=_figure(c["fp16_tflops"]),
            int8_tops=_figure(c["int8_tops"]),
            bf16=bool(c["bf16"]),
            quantizations=tuple(c["quantizations"]),
            visible_env=c["visible_env"],
        )
    cards = {
        key: Card(
            key=key,
            chip=chips[c["chip"]],
            chips_per_card=int(c["chips_per_card"]),
            power_w=_figure(c["power_w"]),
            cooling=c["cooling"],
            interconnect=c["interconnect"],
        )
        for key, c in data["cards"].items()
    }
    return chips, cards


def chips() -> dict[str, Chip]:
    return dict(_load()[0])


def cards() -> dict[str, Card]:
    return dict(_load()[1])


def get_card(key: str) -> Card:
    """The card named ``key``; a ``KeyError`` message lists the known ones."""
    known = _load()[1]
    if key not in known:
        raise KeyError(f"unknown card {key!r}; known cards: {', '.join(sorted(known))}")
    return known[key]

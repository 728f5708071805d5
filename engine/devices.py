"""The device model: chip and card data sheets (memory, bandwidth, throughput, power) from ``device_specs.json``.

Pure data, no device access. Every figure carries its kind (data sheet, derived, field report, third party,
measured on this host, unverified) and its source, so a plan can say which of its inputs are vendor numbers and
which are not. A
:class:`ChipSpec` names its platform (``engine.platforms``), which owns everything that is not a figure: the
visibility variable, dtypes, memory rules, launch arguments. A chip found on a host is
``engine.platforms.reports.Chip``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any, Literal, get_args

FigureKind = Literal["datasheet", "derived", "field", "third_party", "measured", "unverified"]
MIB = 1024**2


@dataclass(frozen=True)
class Figure:
    """One number with where it came from."""

    value: float
    kind: FigureKind
    source: str


@dataclass(frozen=True)
class ChipSpec:
    """One accelerator chip model's data sheet: what a single engine rank owns."""

    key: str
    vendor: str
    platform: str  # an engine.platforms name
    memory_gb: Figure
    memory_visible_mib: Figure
    bandwidth_gbs: Figure
    fp16_tflops: Figure
    int8_tops: Figure
    bf16: bool
    quantizations: tuple[str, ...]

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
class HostCosts:
    """What one engine spends on its host beside the model's arithmetic, which the roofline does not see: input
    processing and scheduling per item, sampling, structured output and detokenization per output token of each
    sequence. A platform's figures (``Platform.host_costs``), not a chip's."""

    seconds_per_item: Figure
    seconds_per_output_token: Figure

    def item_seconds(self, output_tokens: int) -> float:
        return self.seconds_per_item.value + self.seconds_per_output_token.value * output_tokens

    def figures(self) -> dict[str, Figure]:
        return {"host_s_per_item": self.seconds_per_item, "host_s_per_token": self.seconds_per_output_token}


@dataclass(frozen=True)
class Card:
    """A product you buy: one or more chips behind one PCIe slot (or a server, for the 800T A2)."""

    key: str
    chip: ChipSpec
    chips_per_card: int
    power_w: Figure
    cooling: str
    interconnect: str


def _figure(raw: dict[str, Any]) -> Figure:
    kind = raw["kind"]
    if kind not in get_args(FigureKind) or kind == "measured":  # measured figures come from the host, not a file
        raise ValueError(f"device_specs.json: figure kind {kind!r} is not one of the stored kinds (see _doc)")
    return Figure(value=float(raw["value"]), kind=kind, source=str(raw["source"]))


@lru_cache(maxsize=1)
def _load() -> tuple[dict[str, ChipSpec], dict[str, Card]]:
    text = resources.files("engine").joinpath("device_specs.json").read_text(encoding="utf-8")
    data = json.loads(text)
    chips: dict[str, ChipSpec] = {}
    for key, c in data["chips"].items():
        chips[key] = ChipSpec(
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


def chips() -> dict[str, ChipSpec]:
    return dict(_load()[0])


def cards() -> dict[str, Card]:
    return dict(_load()[1])


def get_card(key: str) -> Card:
    """The card named ``key``; a ``KeyError`` message lists the known ones."""
    known = _load()[1]
    if key not in known:
        raise KeyError(f"unknown card {key!r}; known cards: {', '.join(sorted(known))}")
    return known[key]

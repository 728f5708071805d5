"""A platform that exists only in tests, plugged in through ``engine.platforms.register_platform`` by its
dotted path: everything it says differs from every real platform, so a test can tell that the planner, the
doctor and the preflight asked it rather than assuming Ascend."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from engine.devices import Card, ChipSpec, Figure
from engine.platforms.interface import Platform
from engine.platforms.reports import Chip, DeviceReading, Inventory, OpResult, Sampler

NAME = "fake-npu"


def _fig(value: float) -> Figure:
    return Figure(value=value, kind="unverified", source="tests/support/fake_platform.py")


SPEC = ChipSpec(
    key="fake-chip",
    vendor="test",
    platform=NAME,
    memory_gb=_fig(16),
    memory_visible_mib=_fig(16384),
    bandwidth_gbs=_fig(100),
    fp16_tflops=_fig(50),
    int8_tops=_fig(100),
    bf16=True,  # the chip has it; the platform does not offer it, and the platform decides
    quantizations=("fp16", "w8a8"),
)
CARD = Card(key="fake-card", chip=SPEC, chips_per_card=2, power_w=_fig(75), cooling="test", interconnect="test")


def chip(device_id: int, *, health: str = "OK", used_mb: int = 300, pids: tuple[int, ...] = ()) -> Chip:
    return Chip(
        device_id=device_id,
        npu_id=device_id // 2,
        chip_id=device_id % 2,
        name="FakeChip",
        health=health,
        bus_id=f"fake:{device_id}",
        temp_c=40,
        power_w=20.0,
        memory_used_mb=used_mb,
        memory_total_mb=16384,
        process_mb=used_mb if pids else 0,
        pids=pids,
        place=f"FAKE {device_id}",
    )


# 0 idle, 1 held by pid 4242, 2 idle, 3 Critical.
CHIPS = [chip(0), chip(1, used_mb=5000, pids=(4242,)), chip(2), chip(3, health="Critical")]


class FakeSampler:
    def __init__(self, devices: Sequence[int] | None) -> None:
        self.devices = devices

    def sample(self) -> list[DeviceReading]:
        return [
            DeviceReading(c.device_id, temp_c=41.0) for c in CHIPS if not self.devices or c.device_id in self.devices
        ]


class FakePlatform(Platform):
    name = NAME
    family = "FakeNPU"
    device_type = "fake"
    device_control_env_var = "FAKE_VISIBLE_DEVICES"
    telemetry_source = "fake-smi"
    tool = "fake-smi"
    health_hint = "fake-smi --health"
    runtime = "fake_torch"
    busy_mb = 2048
    supported_dtypes = ("float16",)
    memory_utilization_default = 0.8
    memory_utilization_range = (0.75, 0.85)
    memory_utilization_why = "the fake allocator fails above 0.85"
    max_num_seqs_cap = 32
    kv_block_size = 64
    chips: ClassVar[list[Chip]] = CHIPS

    def cards(self) -> dict[str, Card]:
        return {CARD.key: CARD}

    def discover(self) -> Inventory:
        return Inventory(driver_version="fake 1.0", chips=list(self.chips))

    def sampler(self, devices: Sequence[int] | None) -> Sampler:
        return FakeSampler(devices)

    def tiny_op(self) -> tuple[list[OpResult], str | None]:
        return [OpResult(i, None, 1000, 16384) for i in range(2)], None

    def kv_cache_halved(self, accounting: str) -> bool:
        return True

    def kv_accounting(self, accounting: str) -> str:
        return "fake: (util x total - weights - activation - non-torch) / 2"

    def launch_env(self, device_ids: Sequence[int], tp: int) -> dict[str, str]:
        return {**super().launch_env(device_ids, tp), "FAKE_FLAG": str(tp)}

    def launch_notes(self) -> list[str]:
        return ["fake launch note"]

    def compose_comment(self) -> str:
        return "# fake workers"

    def compose_devices(self, device_ids: Sequence[int]) -> list[str]:
        return ["    devices:", *(f'      - "/dev/fake{i}"' for i in device_ids)]

    def compose_mounts(self) -> tuple[str, ...]:
        return ("/opt/fake:/opt/fake",)

"""The CPU platform's ``cpu-host`` card (engine/platforms/cpu_host.py) and the host-cost term of the planner
(engine/planning/host_costs.py): the probe measures positive, finite figures once per process; the card resolves
by name like any other and plans; host costs lengthen each item's time by exactly their seconds, and platforms
without them plan as before."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from engine.devices import Card, ChipSpec, Figure, HostCosts
from engine.planning.host_costs import estimated_per_hour
from engine.planning.planner import plan
from engine.planning.render import render_text
from engine.planning.request import PlanRequest
from engine.planning.shapes import read_model_config
from engine.platforms import cpu_host, find_card, get_platform
from engine.platforms.cpu import CpuPlatform
from engine.platforms.interface import Platform
from vlbatch.settings import Settings
from worker.estimates import dry_run_card

CONFIGS = Path(__file__).parent / "fixtures" / "model_configs"


def _fig(value: float) -> Figure:
    return Figure(value, "unverified", "tests/engine/test_cpu_host.py")


# ---- the probe ---------------------------------------------------------------------------------------------------


def test_the_probe_measures_positive_finite_figures_once_per_process() -> None:
    first = cpu_host.probe()
    assert cpu_host.probe() is first  # cached: the second call measures nothing
    for value in (first.fp32_flops, first.copy_bytes_s, first.memory_bytes, first.matmul_seconds, first.copy_seconds):
        assert value > 0 and math.isfinite(value)
    t = first.topology
    assert 1 <= t.threads <= t.cores <= t.cpus
    assert first.watts is None or first.watts > 0


def _cpu(root: Path, cpu: int, *, core: int, node: int = 0, package: int = 0) -> None:
    d = root / "sys/devices/system/cpu" / f"cpu{cpu}"
    (d / "topology").mkdir(parents=True)
    (d / f"node{node}").mkdir()
    (d / "topology" / "core_id").write_text(f"{core}\n")
    (d / "topology" / "physical_package_id").write_text(f"{package}\n")


def test_the_engine_threads_follow_vllms_auto_binding(tmp_path: Path) -> None:
    # 8 logical CPUs: 4 cores with 2 threads each on node 0, and 2 CPUs on node 1.
    for cpu in range(8):
        _cpu(tmp_path, cpu, core=cpu // 2)
    for cpu in (8, 9):
        _cpu(tmp_path, cpu, core=cpu, node=1)
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/cpuinfo").write_text("model name\t: Test CPU 9000\nflags\t\t: fpu avx2 avx512_bf16\n")
    (tmp_path / "proc/meminfo").write_text("MemTotal:       16384000 kB\nMemFree:         1000 kB\n")
    t = cpu_host.topology(tmp_path, allowed=list(range(10)))
    # One thread per physical core of the first node, one core kept for the scheduler.
    assert (t.cpus, t.cores, t.threads) == (10, 4, 3)
    assert t.model == "Test CPU 9000" and t.bf16
    assert cpu_host.topology(tmp_path, allowed=[0, 1]).threads == 1  # one core: nothing to keep back
    assert cpu_host.memory_bytes(tmp_path) == 16384000 * 1024


def test_the_card_carries_the_probe_as_measured_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    fixed = cpu_host.HostProbe(
        topology=cpu_host.Topology(cpus=4, cores=4, threads=3, model="Test CPU", bf16=False),
        fp32_flops=200e9,
        matmul_seconds=0.01,
        copy_bytes_s=20e9,
        copy_seconds=0.01,
        memory_bytes=32 * 1024**3,
        watts=None,
    )
    monkeypatch.setattr(cpu_host, "probe", lambda root=None: fixed)
    card = cpu_host.host_card()
    chip = card.chip
    assert card.key == "cpu-host" and chip.platform == "cpu" and chip.key == "test-cpu-4c"
    assert chip.fp16_tflops.value == pytest.approx(0.2) and chip.bandwidth_gbs.value == pytest.approx(20)
    assert chip.memory_visible_mib.value == 32 * 1024
    figures = chip.figures()
    assert set(figures) == {"memory_gb", "memory_visible_mib", "bandwidth_gbs", "fp32_tflops", "cores"}
    assert all(f.kind == "measured" and f.value > 0 for f in figures.values())
    assert "fp32" in figures["fp32_tflops"].source and "3 thread" in figures["fp32_tflops"].source
    # No RAPL: no power figure, so nothing is priced.
    assert card.power_w.value == 0 and card.power_w.kind == "unverified"


# ---- the card by name --------------------------------------------------------------------------------------------


def test_cpu_host_resolves_by_name_on_the_cpu_platform() -> None:
    platform, card = find_card("cpu-host")
    assert isinstance(platform, CpuPlatform) and card.key == "cpu-host" and card.chip.platform == "cpu"
    assert card.chip.fp16_tflops.kind == "measured" and card.chip.fp16_tflops.value > 0
    with pytest.raises(KeyError, match="cpu-host"):  # listed among the known cards
        find_card("no-such-card")


def test_a_cpu_host_plan_runs_float32_with_host_costs_and_prints_them() -> None:
    s = read_model_config(CONFIGS / "qwen2.5-0.5b-instruct.json")
    p = plan(s, PlanRequest(card="cpu-host", images_per_prompt=0, output_tokens=64, max_model_len=2048))
    assert isinstance(p.platform, CpuPlatform) and p.engines[0].engine_args["dtype"] == "float32"
    costs = p.roofline.host_costs
    assert costs is not None and p.roofline.host_s_per_item == pytest.approx(costs.item_seconds(64))
    assert p.roofline.items_per_hour_estimate < p.roofline.items_per_hour * p.roofline.efficiency
    text = render_text(p)
    assert "host costs            + " in text and "fp32 matmuls" in text and "host_s_per_item" in text


def test_a_dry_run_plans_for_cpu_host_on_a_cpu_host_and_asks_for_a_card_elsewhere() -> None:
    assert dry_run_card(Settings(platform="cpu"), None) == "cpu-host"
    assert dry_run_card(Settings(platform="cpu"), "atlas-300i-duo") == "atlas-300i-duo"
    assert dry_run_card(Settings(platform="ascend-310p"), None) is None
    assert dry_run_card(Settings(platform="cuda"), None) is None


# ---- the host-cost term ------------------------------------------------------------------------------------------

CHIP = ChipSpec(
    key="slow-chip",
    vendor="test",
    platform="host-cost-test",
    memory_gb=_fig(64),
    memory_visible_mib=_fig(65536),
    bandwidth_gbs=_fig(50),
    fp16_tflops=_fig(1),
    int8_tops=_fig(2),
    bf16=False,
    quantizations=("fp16",),
)
COSTS = HostCosts(_fig(0.02), _fig(0.001))


class _Costly(Platform):
    name = "host-cost-test"

    def cards(self) -> dict[str, Card]:
        return {"slow-card": Card("slow-card", CHIP, 1, _fig(0), "test", "test")}

    def host_costs(self) -> HostCosts:
        return COSTS


class _Free(_Costly):
    def host_costs(self) -> None:  # type: ignore[override]
        return None


def test_host_costs_add_their_seconds_to_each_items_time() -> None:
    s = read_model_config(CONFIGS / "qwen2.5-0.5b-instruct.json")
    req = PlanRequest(card="slow-card", images_per_prompt=0, output_tokens=100, max_model_len=2048)
    free = plan(s, req, platform=_Free()).roofline
    costly = plan(s, req, platform=_Costly()).roofline
    assert free.host_costs is None and free.items_per_hour_estimate == free.items_per_hour * free.efficiency
    assert costly.items_per_hour == free.items_per_hour  # the bound is the chip's; only the estimate changes
    assert costly.host_s_per_item == pytest.approx(0.02 + 0.001 * 100)
    item_s = 3600 / free.items_per_hour_estimate
    assert 3600 / costly.items_per_hour_estimate == pytest.approx(item_s + 0.12)


def test_estimated_per_hour_is_the_bound_at_efficiency_plus_host_seconds() -> None:
    assert estimated_per_hour(3600, 0.5, 0.0) == 1800  # 2 s an item
    assert estimated_per_hour(3600, 0.5, 1.0) == pytest.approx(1200)  # 2 s + 1 s
    assert estimated_per_hour(7200, 1.0, 0.5) == pytest.approx(3600)


def test_accelerator_platforms_have_no_host_costs() -> None:
    for name in ("ascend-310p", "ascend-910b", "cuda"):
        assert get_platform(name).host_costs() is None
    assert get_platform("cpu").host_costs() is not None

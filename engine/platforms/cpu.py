"""vLLM's CPU build: laptops and CI. No chips, no vendor tool, no telemetry.

Code here may assume nothing about accelerators: there are none to discover, so preflight has nothing to
refuse except a configuration that names chips this host does not have (a warning here; a worker that is
meant to own chips is resolved to an accelerator platform, whose preflight refuses).
"""

from __future__ import annotations

from collections.abc import Sequence

from engine import devices
from engine.platforms.interface import Platform
from engine.platforms.power import PowerMeter, rapl_meter
from engine.platforms.reports import Check, DoctorContext, Finding, Inventory, ids_text

# Calibrated once, on the bench's tiny model (whose own arithmetic is negligible, so its time is the engine's host
# time); the reference model is the test of the prediction. Two answer lengths separate the two figures.
HOST_S_PER_ITEM = 0.0033
HOST_S_PER_OUTPUT_TOKEN = 0.00032
HOST_COSTS_SOURCE = (
    "fitted to the tiny model's runs on a 2-core AMD EPYC VM (vLLM CPU 0.32.0, 1 engine thread, float32):"
    " `python benchmarks/estimate_accuracy.py --photos 500 --model tiny --card cpu-host` (72 output tokens/item,"
    " 31.3 ms/item measured, 5.2 ms of it the roofline at 50%) and the same with `--caption` (1487 tokens/item,"
    " 576 ms/item, 100 ms of it the roofline): 26.1 and 476 ms of host time per item = 3.3 ms + 0.32 ms per output"
    " token"
)


class CpuPlatform(Platform):
    name = "cpu"
    family = "CPU"
    device_type = "cpu"
    accelerator = False
    device_control_env_var = None
    telemetry_source = "none"
    supported_dtypes = ("auto", "float32", "bfloat16", "float16")
    memory_utilization_default = 0.90  # of RAM; EngineConfig.kv_cache_memory_bytes is the better knob on CPU
    max_num_seqs_cap = 256
    kv_block_size = 16
    dry_run_card = "cpu-host"

    def cards(self) -> dict[str, devices.Card]:
        """One card, this host, measured by a short probe on first use (``engine.platforms.cpu_host``)."""
        from engine.platforms.cpu_host import host_card

        return {"cpu-host": host_card(self.root)}

    def card_keys(self) -> list[str]:
        return ["cpu-host"]

    def dtype(self, chip: devices.ChipSpec) -> str:
        """float32: what the CPU build is run with here (the bench, the demo), and what the card's FLOPS measure."""
        return "float32"

    def host_costs(self) -> devices.HostCosts:
        """The engine's host time (input processing, scheduling, sampling, structured output, detokenization), which
        dominates a small model on CPU: calibrated once on the bench's tiny model (see HOST_COSTS_SOURCE)."""
        return devices.HostCosts(
            devices.Figure(HOST_S_PER_ITEM, "measured", HOST_COSTS_SOURCE),
            devices.Figure(HOST_S_PER_OUTPUT_TOKEN, "measured", HOST_COSTS_SOURCE),
        )

    def layout_notes(self, card: devices.Card, tp: int) -> list[str]:
        return [
            "the CPU build runs float32 here: weights and KV take twice the bytes planned (2 per value); size the KV"
            " cache with kv_cache_memory_bytes rather than gpu_memory_utilization of the host's RAM"
        ]

    def power_meter(self, devices: Sequence[int] | None) -> PowerMeter:
        """The CPU packages' RAPL counters where the host exposes them; unknown otherwise."""
        return rapl_meter()

    def discover(self) -> Inventory:
        return Inventory(driver_version="", chips=[])

    def preflight(self, visible: Sequence[int] | None, tensor_parallel_size: int) -> list[Finding]:
        if not visible:
            return []
        return [
            Finding(
                "warning",
                f"VLBATCH_VISIBLE_DEVICES names chips {ids_text(visible)} but this host has no accelerator"
                f" ({'; '.join(self.notes) or 'none detected'}): unset it on a CPU host",
                kind="visible",
            )
        ]

    def doctor_checks(self, ctx: DoctorContext) -> list[Check]:
        found = "; ".join(self.notes) or "no accelerator found"
        return [Check("info", f"{found}; device checks skipped (CPU host)")]

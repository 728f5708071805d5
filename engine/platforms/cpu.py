"""vLLM's CPU build: laptops and CI. No chips, no vendor tool, no telemetry.

Code here may assume nothing about accelerators: there are none to discover, so preflight has nothing to
refuse except a configuration that names chips this host does not have (a warning here; a worker that is
meant to own chips is resolved to an accelerator platform, whose preflight refuses).
"""

from __future__ import annotations

from collections.abc import Sequence

from engine.platforms.interface import Platform
from engine.platforms.power import PowerMeter, rapl_meter
from engine.platforms.reports import Check, DoctorContext, Finding, Inventory, ids_text


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

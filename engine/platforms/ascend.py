"""What every Ascend platform shares: npu-smi discovery and telemetry, the container's device nodes and driver
mounts, the launch environment, and the doctor's Ascend lines.

Code here may assume an Ascend driver stack: it runs ``npu-smi`` (through :mod:`engine.platforms.npu_smi`,
always with a timeout) and reads ``/dev/davinci*`` and the CANN version files. It imports torch_npu only
inside methods (:func:`engine.platforms.ascend_host.tiny_op_per_chip`). Ids are the logical device ids
npu-smi prints in its ``Device`` column: the ids ``ASCEND_RT_VISIBLE_DEVICES`` selects. A 300I Duo card is
one NPU id with two chips.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence
from typing import ClassVar

from engine.platforms import ascend_host, ascend_matrix, npu_smi
from engine.platforms.interface import Platform
from engine.platforms.reports import (
    Check,
    Chip,
    DeviceReading,
    DoctorContext,
    FailureStreak,
    Inventory,
    OpResult,
    Sampler,
    chip_readings,
)
from engine.platforms.tools import DiscoveryError, ToolNotFound

log = logging.getLogger(__name__)

# Driver files the container needs from the host (vllm-ascend's 300I DUO docker run line).
ASCEND_MOUNTS = (
    "/usr/local/dcmi:/usr/local/dcmi",
    "/usr/local/bin/npu-smi:/usr/local/bin/npu-smi",
    "/usr/local/Ascend/driver/lib64/:/usr/local/Ascend/driver/lib64/",
    "/usr/local/Ascend/driver/version.info:/usr/local/Ascend/driver/version.info",
    "/etc/ascend_install.info:/etc/ascend_install.info",
)


def inventory(info: npu_smi.NpuSmiInfo, mapping: Sequence[npu_smi.MappingRow] = ()) -> Inventory:
    """Join the info table (and, for tables without a Device column, the ``-m`` mapping) into chips."""
    logic = {(m.npu_id, m.chip_id): m.logic_id for m in mapping if m.logic_id is not None}
    held: dict[tuple[int, int], list[npu_smi.ProcessRow]] = defaultdict(list)
    for p in info.processes:
        held[(p.npu_id, p.chip_id)].append(p)
    chips = []
    for row in info.chips:
        key = (row.npu_id, row.chip_id)
        # 910B tables have no Device column; there one NPU id is one chip and the logical ids follow it.
        dev = row.device_id if row.device_id is not None else logic.get(key, row.npu_id)
        procs = held.get(key, [])
        chips.append(
            Chip(
                device_id=dev,
                npu_id=row.npu_id,
                chip_id=row.chip_id,
                name=row.name,
                health=row.health,
                bus_id=row.bus_id,
                temp_c=row.temp_c,
                power_w=row.power_w,
                memory_used_mb=row.memory_used_mb,
                memory_total_mb=row.memory_total_mb,
                process_mb=sum(p.memory_mb for p in procs),
                pids=tuple(sorted({p.pid for p in procs})),
            )
        )
    ids = [c.device_id for c in chips]
    if len(set(ids)) != len(ids):
        raise npu_smi.NpuSmiError(f"npu-smi lists device ids {ids} with repeats; cannot tell the chips apart")
    return Inventory(driver_version=info.version, chips=chips)


def discover(*, binary: str = "npu-smi", timeout_s: float = npu_smi.DEFAULT_TIMEOUT_S) -> Inventory:
    """Run ``npu-smi info`` and build the inventory. Raises :class:`npu_smi.NpuSmiError` (with the fix)."""
    info = npu_smi.parse_info(npu_smi.run(["info"], binary=binary, timeout_s=timeout_s))
    mapping: list[npu_smi.MappingRow] = []
    if any(c.device_id is None for c in info.chips):
        mapping = npu_smi.parse_mapping(npu_smi.run(["info", "-m"], binary=binary, timeout_s=timeout_s))
    return inventory(info, mapping)


class NpuSmiSampler:
    """Reads the chips this worker owns (all chips when ``devices`` is None) through npu-smi.

    One ``npu-smi info`` call gives every chip's temperature and memory. 310P tables print Power as ``NA``,
    so the card's power comes from ``npu-smi info -t common -i <NPU id>`` (its mcu block), once per card.
    A sample never raises: a failure is logged once per streak and yields no readings.
    """

    def __init__(
        self, devices: Sequence[int] | None, *, binary: str = "npu-smi", timeout_s: float = 10.0, power: bool = True
    ) -> None:
        self.devices = set(devices) if devices is not None else None
        self.binary = binary
        self.timeout_s = timeout_s
        self.power = power
        self._streak = FailureStreak(log)

    def sample(self) -> list[DeviceReading]:
        try:
            info = npu_smi.parse_info(npu_smi.run(["info"], binary=self.binary, timeout_s=self.timeout_s))
            chips = inventory(info).chips
            card_power = self._card_power({c.npu_id for c in chips if c.power_w is None and self._mine(c)})
        except npu_smi.NpuSmiError as e:
            return self._streak.failed(e)
        self._streak.ended()
        return chip_readings(chips, self.devices, power=card_power)

    def _mine(self, chip: Chip) -> bool:
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


class AscendPlatform(Platform):
    """An Ascend NPU under vllm-ascend. Subclasses: :class:`Ascend310PPlatform`, :class:`Ascend910BPlatform`."""

    device_type = "npu"
    device_control_env_var = "ASCEND_RT_VISIBLE_DEVICES"
    telemetry_source = "npu-smi"
    tool = "npu-smi"
    health_hint = "npu-smi info -t health"
    runtime = "torch_npu"
    implied_by = ("torch-npu", "vllm-ascend")
    busy_mb = 4096
    kv_block_size = 128
    quantization_backend = "ascend"  # vllm-ascend's ModelSlim W8A8/W4A8 loader
    # The software stack this chip is validated with (None: not pinned; the doctor only reports versions).
    stack: ClassVar[ascend_matrix.Stack | None] = None
    chip_marker: ClassVar[str] = ""  # what npu-smi's Name column contains for this chip ("310P", "910B")

    @classmethod
    def claims_chip(cls, chip_name: str) -> bool:
        return bool(cls.chip_marker) and cls.chip_marker in chip_name.upper()

    # ---- devices ----------------------------------------------------------------------------------------------

    def discover(self) -> Inventory:
        return discover(binary=self.npu_smi, timeout_s=self.timeout_s)

    def sampler(self, devices: Sequence[int] | None) -> Sampler:
        return NpuSmiSampler(devices, binary=self.npu_smi)

    def tiny_op(self) -> tuple[list[OpResult], str | None]:
        return ascend_host.tiny_op_per_chip()

    # ---- launch -----------------------------------------------------------------------------------------------

    def launch_env(self, device_ids: Sequence[int], tp: int) -> dict[str, str]:
        env = super().launch_env(device_ids, tp)
        env |= {"PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True", "OMP_NUM_THREADS": "1", "TASK_QUEUE_ENABLE": "1"}
        if tp > 1:
            env["HCCL_OP_EXPANSION_MODE"] = "AIV"
        return env

    def compose_comment(self) -> str:
        return "# Each worker maps only its own /dev/davinciN; the device ids are npu-smi's Device column."

    def compose_devices(self, device_ids: Sequence[int]) -> list[str]:
        lines = ["    devices:"]
        lines += [f'      - "/dev/davinci{i}"' for i in device_ids]
        lines += [f'      - "{d}"' for d in ascend_host.CONTROL_NODES]
        return lines

    def compose_mounts(self) -> tuple[str, ...]:
        return ASCEND_MOUNTS

    # ---- doctor -----------------------------------------------------------------------------------------------

    def doctor_checks(self, ctx: DoctorContext) -> list[Check]:
        checks: list[Check] = []
        inv: Inventory | None = None
        try:
            inv = ctx.discover() if ctx.discover else self.discover()
        except ToolNotFound as e:
            nodes = ascend_host.davinci_nodes(ctx.root)
            if nodes:
                checks.append(Check("fail", f"/dev/davinci{','.join(map(str, nodes))} present but {e}"))
            else:
                why = f"{self.npu_smi} is not on PATH and /dev has no davinci nodes"
                if not ctx.required:
                    return [Check("info", f"no Ascend NPU found: {why}; device checks skipped (CPU host)")]
                # Device nodes and driver mounts would all fail too; one line says it. Versions still help.
                checks.append(Check("fail", f"no Ascend NPU found: {why}; run on the NPU host or map the devices"))
                return checks + self.stack_checks(ctx, None) + self.tiny_op_checks(ctx)
        except DiscoveryError as e:
            checks.append(Check("fail", str(e)))
        if inv is not None:
            checks += self.device_checks(ctx, inv)
        checks += self.container_checks(ctx, inv)
        checks += self.stack_checks(ctx, inv)
        checks += self.tiny_op_checks(ctx)
        return checks

    def container_checks(self, ctx: DoctorContext, inv: Inventory | None) -> list[Check]:
        checks = [
            Check("fail", f"{node} missing: add --device {node} to docker run")
            for node in ascend_host.missing_control_nodes(ctx.root)
        ]
        checks += [
            Check("fail", f"{path} missing: add {flag} to docker run")
            for path, flag in ascend_host.missing_driver_mounts(ctx.root)
        ]
        nodes = ascend_host.davinci_nodes(ctx.root)
        if not nodes:
            checks.append(Check("fail", "no /dev/davinciN device nodes: add --device /dev/davinciN for each chip"))
        elif inv is not None and len(nodes) != len(inv.chips):
            checks.append(
                Check(
                    "warn",
                    f"{len(nodes)} /dev/davinci nodes ({','.join(map(str, nodes))}) but npu-smi shows"
                    f" {len(inv.chips)} chips: map one --device /dev/davinciN per chip you mean to use",
                )
            )
        if not checks:
            checks.append(
                Check("ok", f"device nodes and driver mounts present (/dev/davinci{','.join(map(str, nodes))})")
            )
        return checks

    def stack_checks(self, ctx: DoctorContext, inv: Inventory | None) -> list[Check]:
        stack = self.stack
        checks: list[Check] = []
        if stack is None:
            found = [f"{p} {v}" for p in ("torch", "torch-npu", "vllm", "vllm-ascend") if (v := ctx.dist_version(p))]
            checks.append(
                Check(
                    "info", f"no validated stack is pinned for {self.family}; installed: {', '.join(found) or 'none'}"
                )
            )
        else:
            for pin in stack.pins:
                if pin.package == "cann":
                    have, where = ascend_host.cann_version(ctx.toolkit_home, ctx.root)
                    if have is None:
                        checks.append(
                            Check(
                                "fail",
                                f"CANN not found (looked in {where}): install CANN {pin.version} or source set_env.sh",
                            )
                        )
                        continue
                else:
                    have = ctx.dist_version(pin.package)
                    if have is None:
                        checks.append(
                            Check("fail", f"{pin.package} not installed: pip install {pin.package}=={pin.version}")
                        )
                        continue
                if ascend_matrix.matches(have, pin.version):
                    checks.append(Check("ok", f"{pin.package} {have} (pinned {pin.version})"))
                else:
                    fix = (
                        f"pip install {pin.package}=={pin.version}"
                        if pin.package != "cann"
                        else f"install CANN {pin.version}"
                    )
                    checks.append(
                        Check("fail", f"{pin.package} {have} is not the validated {pin.version} ({stack.name}): {fix}")
                    )
            installed = [bad for bad in stack.forbidden if ctx.dist_version(bad)]
            for bad in installed:
                checks.append(
                    Check("fail", f"{bad} is installed but unsupported on {stack.product}: pip uninstall -y {bad}")
                )
            for module in stack.forbidden_modules:
                origin = ctx.module_origin(module)
                if origin and not installed:  # importable with no distribution behind it (copied in, PYTHONPATH)
                    checks.append(
                        Check(
                            "fail",
                            f"{module} is importable ({origin}) but unsupported on {stack.product}: vLLM would use"
                            f" its kernels; remove it (pip uninstall -y {' '.join(stack.forbidden)}, or take its"
                            " folder off PYTHONPATH)",
                        )
                    )
        if inv is not None:
            cann = next((p.version for p in stack.pins if p.package == "cann"), None) if stack else None
            if stack is not None and stack.driver:
                note = f"pinned {stack.driver}"
            else:
                note = f"not pinned; see the CANN {cann} release notes" if cann else "not pinned"
            checks.append(Check("info", f"driver/npu-smi {inv.driver_version} ({note})"))
        return checks

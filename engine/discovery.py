"""Which Ascend chips this host has, and whether the configuration uses each one exactly once.

Ids are the logical device ids npu-smi prints in its ``Device`` column: the ids
``ASCEND_RT_VISIBLE_DEVICES`` selects. A 300I Duo card is one NPU id with two chips.

Field failures this module exists to catch: the chips are 0,1,4,5 but the configuration says
0,1,2,3 (half the chips idle and nothing said so), and two engines on one chip, each sizing its KV
cache from the same free memory (invariant 8: devices are owned).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from engine import npu_smi

# Idle 310P3 chips report 1.1-1.9 GB used (driver reserve); more than this means someone holds the chip.
BUSY_MB = 4096
_BAD_HEALTH = {"alarm", "critical", "unknown"}


@dataclass(frozen=True)
class Chip:
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
    process_mb: int = 0  # memory held by processes npu-smi lists on this chip
    pids: tuple[int, ...] = ()

    @property
    def free_mb(self) -> int:
        return self.memory_total_mb - self.memory_used_mb

    @property
    def healthy(self) -> bool:
        return self.health.lower() == "ok"

    @property
    def label(self) -> str:
        return f"chip {self.device_id} (NPU {self.npu_id} chip {self.chip_id}, {self.bus_id})"


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
    level: Literal["error", "warning"]
    message: str  # says what is wrong and the exact fix
    kind: str = ""  # visible, missing, outside, size, shared, health, busy, unused


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


def _ids(ids: Iterable[int]) -> str:
    return ",".join(str(i) for i in sorted(ids)) or "none"


def check_assignment(
    inv: Inventory,
    *,
    instances: Mapping[str, Sequence[int]],
    visible: Sequence[int] | None = None,
    tensor_parallel_size: int | None = None,
) -> list[Finding]:
    """Compare the chips present with ``ASCEND_RT_VISIBLE_DEVICES`` and the configured instances.

    With no instances configured, the visible devices (or else the first ``tensor_parallel_size``
    chips, which is what an engine takes by default) count as one instance.
    """
    present = {c.device_id: c for c in inv.chips}
    found: list[Finding] = []
    derived = not instances
    if derived:
        default = list(visible) if visible else inv.device_ids[: tensor_parallel_size or 1]
        instances = {"default": default}
    if visible is not None:
        absent = sorted(set(visible) - present.keys())
        if absent:
            others = sorted(present.keys() - set(visible))
            keep = [v for v in visible if v in present] + others[: len(absent)]
            found.append(
                Finding(
                    "error",
                    f"ASCEND_RT_VISIBLE_DEVICES names {_ids(absent)} but npu-smi shows chips {_ids(present.keys())}:"
                    f" set ASCEND_RT_VISIBLE_DEVICES={_ids(keep)}",
                    kind="visible",
                )
            )
    owned = {i for ids in instances.values() for i in ids}
    spare = sorted(present.keys() - owned)
    owners: dict[int, list[str]] = defaultdict(list)
    for name, ids in instances.items():
        for i in ids:
            owners[i].append(name)
        missing = sorted(set(ids) - present.keys())
        if missing and not (derived and visible):  # already reported against ASCEND_RT_VISIBLE_DEVICES
            found.append(
                Finding(
                    "error",
                    f"instance {name!r} is configured for chips {_ids(ids)} but {_ids(missing)} do not exist"
                    f" (npu-smi shows {_ids(present.keys())}): replace them with unused chips {_ids(spare)}",
                    kind="missing",
                )
            )
        if visible is not None and set(ids) - set(visible) - set(missing):
            outside = sorted(set(ids) - set(visible) - set(missing))
            found.append(
                Finding(
                    "error",
                    f"instance {name!r} uses chips {_ids(outside)} outside ASCEND_RT_VISIBLE_DEVICES={_ids(visible)}:"
                    " add them to ASCEND_RT_VISIBLE_DEVICES or take them out of the instance",
                    kind="outside",
                )
            )
        if tensor_parallel_size is not None and len(ids) != tensor_parallel_size:
            found.append(
                Finding(
                    "error",
                    f"instance {name!r} has {len(ids)} chips ({_ids(ids)}) but tensor_parallel_size="
                    f"{tensor_parallel_size}: give it exactly {tensor_parallel_size} chips or change the engine's"
                    " tensor_parallel_size",
                    kind="size",
                )
            )
    for dev, names in sorted(owners.items()):
        if len(names) > 1:
            found.append(
                Finding(
                    "error",
                    f"chip {dev} is shared by instances {', '.join(repr(n) for n in names)}: each engine sizes its"
                    " KV cache from the same free memory and they run out; give every instance its own chips",
                    kind="shared",
                )
            )
    for dev, chip in sorted(present.items()):
        used = dev in owners
        if not chip.healthy:
            level: Literal["error", "warning"] = "error" if used and chip.health.lower() in _BAD_HEALTH else "warning"
            fix = "move the instance to a healthy chip" if used else "keep it out of every instance"
            found.append(
                Finding(
                    level,
                    f"{chip.label} health is {chip.health}: {fix} and check it with npu-smi info -t health",
                    kind="health",
                )
            )
        if used and chip.memory_used_mb >= BUSY_MB:
            who = f" by pid {', '.join(map(str, chip.pids))}" if chip.pids else " by a process not visible here"
            found.append(
                Finding(
                    "warning",
                    f"{chip.label} already has {chip.memory_used_mb} of {chip.memory_total_mb} MB in use{who}:"
                    " an engine started there sizes its KV cache against memory it does not own; stop that process"
                    " or use another chip",
                    kind="busy",
                )
            )
    unused = sorted(d for d, c in present.items() if d not in owners and c.healthy)
    if unused:
        found.append(
            Finding(
                "warning",
                f"chips {_ids(unused)} are present and healthy but no instance uses them: add them to an instance"
                f" or start another one with ASCEND_RT_VISIBLE_DEVICES={_ids(unused)}",
                kind="unused",
            )
        )
    return found


def preflight(*, visible: Sequence[int] | None, tensor_parallel_size: int, binary: str = "npu-smi") -> list[Finding]:
    """Worker start (invariant 8): the chips this process was given exist, are healthy and are not held
    by another process. Chips it was not given belong to other workers, so "unused" is not reported.
    No npu-smi (CPU, NVIDIA) means nothing to check."""
    try:
        inv = discover(binary=binary)
    except npu_smi.NpuSmiNotFound:
        return []
    except npu_smi.NpuSmiError as e:
        return [Finding("error", str(e), kind="npu-smi")]
    found = check_assignment(inv, instances={}, visible=visible, tensor_parallel_size=tensor_parallel_size)
    return [f for f in found if f.kind != "unused"]

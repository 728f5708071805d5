"""Ascend ``npu-smi``: run it (with a timeout) and parse what it prints. No SDK, no device access.

What this module may assume, learned from real outputs (tests/engine/fixtures/npu_smi/):

* ``npu-smi info`` prints one table. Each chip takes two rows. On 310P3 (106 columns) the second
  header row is ``Chip    Device``, the chip row carries ``Memory-Usage(MB)``, and Power is ``NA``;
  the two chips of a 300I Duo card share the NPU id and the Bus-Id. On 910B (98 columns) the second
  row is just ``Chip`` and the last ``used / total`` pair is ``HBM-Usage(MB)``.
* NPU ids are card ids and can be large (32768); the ``Device`` column is the logical id that
  ``ASCEND_RT_VISIBLE_DEVICES`` selects.
* A complete output ends with a ``+===...+`` border; anything else was cut off.
* ``-t common`` / ``-t usages`` print ``Key : value`` blocks separated by blank lines, one block per
  chip (in ``-t usages`` the ``Chip ID`` line closes its block). A 310P card reports its power only in
  the ``mcu`` block of ``-t common``.
* When the driver cannot be reached it prints ``dcmi module initialize failed. ret is -8005``.

Nothing here raises anything but :class:`NpuSmiError` for bad or missing input.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from engine.platforms.tools import DiscoveryError, ToolNotFound, run_tool

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 15.0

_PAIR = re.compile(r"(\d+)\s*/\s*(\d+)")
_DCMI = re.compile(r"dcmi module initialize failed\. ret is (-?\d+)")
_BORDER = re.compile(r"^\+[-=+]+\+$")


class NpuSmiError(DiscoveryError):
    """npu-smi is missing, failed, or printed something we cannot read. The message names the fix."""


class NpuSmiNotFound(NpuSmiError, ToolNotFound):
    """The npu-smi binary is not on this machine (no Ascend driver, or not mounted into the container)."""


@dataclass(frozen=True)
class ChipRow:
    """One chip as the ``npu-smi info`` table shows it."""

    npu_id: int
    chip_id: int
    device_id: int | None  # the logical id; 910B tables have no Device column
    name: str
    health: str
    bus_id: str
    power_w: float | None
    temp_c: int | None
    aicore_pct: int | None
    memory_used_mb: int
    memory_total_mb: int
    hugepages_used: int | None = None
    hugepages_total: int | None = None


@dataclass(frozen=True)
class ProcessRow:
    npu_id: int
    chip_id: int
    pid: int
    name: str
    memory_mb: int


@dataclass(frozen=True)
class NpuSmiInfo:
    version: str
    chips: list[ChipRow]
    processes: list[ProcessRow] = field(default_factory=list)


@dataclass(frozen=True)
class ChipCommon:
    """Per-chip values from ``npu-smi info -t common -i N`` (and ``-t usages``)."""

    chip_id: int
    temp_c: float | None = None
    aicore_pct: float | None = None
    memory_usage_pct: float | None = None
    aicore_freq_mhz: float | None = None
    memory_capacity_mb: int | None = None


@dataclass(frozen=True)
class CardReport:
    """One card (NPU id) from a ``-t common`` or ``-t usages`` report."""

    npu_id: int
    chip_count: int | None
    chips: list[ChipCommon]
    power_w: float | None = None  # card power (310P: from the mcu block), shared by its chips
    mcu_temp_c: float | None = None


@dataclass(frozen=True)
class MappingRow:
    npu_id: int
    chip_id: int
    logic_id: int | None  # None for the Mcu pseudo-chip
    name: str


def run(args: Sequence[str], *, binary: str = "npu-smi", timeout_s: float = DEFAULT_TIMEOUT_S) -> str:
    """Run ``npu-smi ARGS`` and return stdout; every failure becomes an :class:`NpuSmiError`."""
    proc = run_tool(
        binary,
        args,
        timeout_s=timeout_s,
        fix="install the Ascend driver, or in a container mount it with "
        "-v /usr/local/bin/npu-smi:/usr/local/bin/npu-smi -v /usr/local/dcmi:/usr/local/dcmi",
        error=NpuSmiError,
        missing=NpuSmiNotFound,
    )
    out = proc.stdout or ""
    check_error(out + "\n" + (proc.stderr or ""))
    if proc.returncode != 0:
        tail = (proc.stderr or out).strip().splitlines()[-1:] or ["no output"]
        raise NpuSmiError(f"'{' '.join(proc.args)}' exited with {proc.returncode}: {tail[0]}")
    return out


def check_error(text: str) -> None:
    """Raise for the driver errors npu-smi prints instead of a table."""
    m = _DCMI.search(text)
    if m:
        code = m.group(1)
        hint = (
            "the chips are usually held by another container or process; stop it, or map "
            "/dev/davinci_manager, /dev/devmm_svm, /dev/hisi_hdc and /usr/local/Ascend/driver into this one"
            if code == "-8005"
            else "check that the Ascend driver is loaded (npu-smi info on the host)"
        )
        raise NpuSmiError(f"npu-smi: dcmi module initialize failed (ret {code}): {hint}")


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _int(text: str, what: str, lineno: int) -> int:
    try:
        return int(text)
    except ValueError:
        raise NpuSmiError(f"npu-smi info line {lineno}: expected {what}, got {text!r}") from None


def _opt_num(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None  # "NA", "-" and the like


def parse_info(text: str) -> NpuSmiInfo:
    """Parse ``npu-smi info``. Raises :class:`NpuSmiError` for errors, foreign text or a cut-off table."""
    check_error(text)
    numbered = [(i, ln.rstrip()) for i, ln in enumerate(text.splitlines(), start=1) if ln.strip()]
    lines = [ln for _, ln in numbered]
    version = ""
    for ln in lines[:3]:
        m = re.search(r"npu-smi\s+(\S+)", ln)
        if m:
            version = m.group(1)
            break
    try:
        start = next(i for i, ln in enumerate(lines) if "Health" in ln and "Bus-Id" not in ln and "NPU" in ln)
    except StopIteration:
        if version:
            raise NpuSmiError("npu-smi info output is truncated before the chip table; run it again") from None
        head = lines[0][:60] if lines else "empty output"
        raise NpuSmiError(f"not an npu-smi info table (first line: {head!r})") from None
    if not version:
        raise NpuSmiError("npu-smi info output has no version line: it is cut off at the top")
    if not _BORDER.match(lines[-1]):
        raise NpuSmiError(
            f"npu-smi info output is truncated after line {numbered[-1][0]} ({lines[-1][:50]!r}); run it again"
        )

    chips: list[ChipRow] = []
    processes: list[ProcessRow] = []
    pending: tuple[int, list[str]] | None = None  # the first row of a chip, waiting for its second
    in_processes = False
    for lineno, ln in numbered[start:]:
        if _BORDER.match(ln):
            if pending is not None:
                raise NpuSmiError(f"npu-smi info line {lineno}: a chip row has no second row (output damaged)")
            continue
        cells = _cells(ln)
        first = cells[0].split()
        if "Process id" in ln:
            in_processes = True
            continue
        if not first or not first[0].isdigit():
            continue  # header rows and "No running processes found in NPU 2"
        if in_processes:
            if len(cells) < 4:
                raise NpuSmiError(f"npu-smi info line {lineno}: process row has {len(cells)} cells: {ln!r}")
            npu, chip = [*first, "0"][:2]
            processes.append(
                ProcessRow(
                    npu_id=_int(npu, "an NPU id", lineno),
                    chip_id=_int(chip, "a chip id", lineno),
                    pid=_int(cells[1], "a process id", lineno),
                    name=cells[2],
                    memory_mb=_int(cells[3].split()[0] if cells[3] else "", "process memory", lineno),
                )
            )
            continue
        if pending is None:
            pending = (lineno, cells)
            continue
        chips.append(_chip(pending[1], cells, lineno))
        pending = None
    if not in_processes:
        raise NpuSmiError("npu-smi info output is truncated: it ends before the process table; run it again")
    if not chips:
        raise NpuSmiError("npu-smi info shows no chips: the driver sees no device (check npu-smi on the host)")
    return NpuSmiInfo(version=version, chips=chips, processes=processes)


def _chip(row1: list[str], row2: list[str], lineno: int) -> ChipRow:
    if len(row1) < 3 or len(row2) < 3:
        raise NpuSmiError(f"npu-smi info line {lineno}: expected 3 columns, got {len(row2)}")
    npu_name = row1[0].split()
    if len(npu_name) < 2:
        raise NpuSmiError(f"npu-smi info line {lineno - 1}: expected 'NPU Name', got {row1[0]!r}")
    stats = row1[2].split()
    power = _opt_num(stats[0]) if stats else None
    temp = _opt_num(stats[1]) if len(stats) > 1 else None
    huge = _PAIR.search(row1[2])
    chip_dev = row2[0].split()
    usage = row2[2].split()
    pairs = _PAIR.findall(row2[2])
    if not pairs:
        raise NpuSmiError(f"npu-smi info line {lineno}: no 'used / total' memory in {row2[2]!r}")
    used, total = pairs[-1]  # 910B: Memory-Usage then HBM-Usage; the HBM pair is the device memory
    aicore = _opt_num(usage[0]) if usage else None
    return ChipRow(
        npu_id=_int(npu_name[0], "an NPU id", lineno - 1),
        chip_id=_int(chip_dev[0] if chip_dev else "", "a chip id", lineno),
        device_id=_int(chip_dev[1], "a device id", lineno) if len(chip_dev) > 1 else None,
        name=" ".join(npu_name[1:]),
        health=row1[1],
        bus_id=row2[1],
        power_w=power,
        temp_c=int(temp) if temp is not None else None,
        aicore_pct=int(aicore) if aicore is not None else None,
        memory_used_mb=int(used),
        memory_total_mb=int(total),
        hugepages_used=int(huge.group(1)) if huge else None,
        hugepages_total=int(huge.group(2)) if huge else None,
    )


def _blocks(text: str) -> list[dict[str, str]]:
    check_error(text)
    blocks: list[dict[str, str]] = [{}]
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            if blocks[-1]:
                blocks.append({})
            continue
        key, sep, value = line.partition(":")
        if not sep:
            raise NpuSmiError(f"npu-smi report: expected 'Key : value', got {line[:60]!r}")
        blocks[-1][key.strip()] = value.strip()
    return [b for b in blocks if b]


def _num(block: dict[str, str], *keys: str) -> float | None:
    for k in keys:
        if k in block:
            return _opt_num(block[k])
    return None


def parse_card_report(text: str) -> CardReport:
    """Parse ``npu-smi info -t common -i N`` or ``-t usages -i N`` into one card."""
    blocks = _blocks(text)
    head = blocks[0] if blocks else {}
    if "NPU ID" not in head:
        raise NpuSmiError(f"not an npu-smi -t report: no 'NPU ID' line (got {list(head)[:3]})")
    npu_id = int(_num(head, "NPU ID") or 0)
    count = _num(head, "Chip Count")
    chips: list[ChipCommon] = []
    power = mcu_temp = None
    for b in blocks:
        if b.get("Chip Name", "").lower() == "mcu":
            power = _num(b, "NPU Real-time Power(W)", "Power Dissipation(W)")
            mcu_temp = _num(b, "Temperature(C)")
            continue
        if "Chip ID" not in b:
            continue
        cap = _num(b, "HBM Capacity(MB)", "DDR Capacity(MB)")
        chips.append(
            ChipCommon(
                chip_id=int(_num(b, "Chip ID") or 0),
                temp_c=_num(b, "Temperature(C)"),
                aicore_pct=_num(b, "Aicore Usage Rate(%)"),
                memory_usage_pct=_num(b, "HBM Usage Rate(%)", "Memory Usage Rate(%)", "DDR Usage Rate(%)"),
                aicore_freq_mhz=_num(b, "Aicore curFreq(MHZ)", "Aicore Freq(MHZ)"),
                memory_capacity_mb=int(cap) if cap is not None else None,
            )
        )
    if power is None:
        power = _num(head, "NPU Real-time Power(W)", "Power Dissipation(W)")
    if count is not None and len(chips) != int(count):
        raise NpuSmiError(f"npu-smi report for NPU {npu_id} says {int(count)} chips but lists {len(chips)}: truncated")
    n = int(count) if count is not None else None
    return CardReport(npu_id=npu_id, chip_count=n, chips=chips, power_w=power, mcu_temp_c=mcu_temp)


def parse_mapping(text: str) -> list[MappingRow]:
    """Parse ``npu-smi info -m``: NPU id, chip id, logical id (``-`` for the Mcu) and chip name."""
    check_error(text)
    rows: list[MappingRow] = []
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines or not lines[0].strip().startswith("NPU ID"):
        raise NpuSmiError("not an npu-smi info -m mapping (no 'NPU ID' header)")
    for lineno, ln in enumerate(lines[1:], start=2):
        parts = ln.split(None, 3)
        if len(parts) < 4:
            raise NpuSmiError(f"npu-smi -m line {lineno}: expected 4 columns, got {ln.strip()!r} (truncated?)")
        logic = None if parts[2] == "-" else _int(parts[2], "a chip logic id", lineno)
        npu, chip = _int(parts[0], "an NPU id", lineno), _int(parts[1], "a chip id", lineno)
        rows.append(MappingRow(npu, chip, logic, parts[3].strip()))
    return rows

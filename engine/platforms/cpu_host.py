"""The ``cpu-host`` card: this host's CPU as the planner sees a chip, its figures measured here, not read from a file.

A CPU has no data sheet the planner could use (the same model name comes with any core count, memory and
bandwidth), so the CPU platform's one card is measured once per process by a short probe (a few tenths of a
second):

- threads: what vLLM's CPU backend would give its one worker (``VLLM_CPU_OMP_THREADS_BIND=auto``,
  ``vllm/utils/ompmultiprocessing.py``): one logical CPU per physical core of the first NUMA node this process
  may run on, less one core reserved for the engine's scheduler process when there is more than one;
- fp32 FLOPS: the best of a few 1024x1024 fp32 matmuls (torch) at that thread count. The CPU build runs float32
  (``CpuPlatform.dtype``), so this is the float rate the roofline divides by (``ChipSpec.fp16_tflops`` is
  the planner's "float matmul" figure; ``figures()`` names it fp32 here);
- memory bandwidth: the best of a few copies of a 128 MiB tensor (past any last-level cache) at that thread
  count, counted as STREAM's Copy counts (bytes read + bytes written);
- memory: ``MemTotal`` of ``/proc/meminfo`` (what vLLM's CPU worker sizes ``gpu_memory_utilization`` against);
- power: the CPU packages' RAPL counters over the matmuls when the host exposes them readable; otherwise no
  figure (0, unverified), never a guess.

torch is imported inside :func:`probe` only, so importing this module touches no vendor code.
"""

from __future__ import annotations

import math
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from engine.devices import MIB, Card, ChipSpec, Figure
from engine.platforms.interface import PlatformRefusal
from engine.platforms.power import rapl_meter

CARD = "cpu-host"
MATMUL_N = 1024
COPY_BYTES = 128 * MIB
PROBE_BUDGET_S = 0.3  # per measurement, after its first (untimed) run


NOT_PROBED = Figure(0, "unverified", "not probed")


@dataclass(frozen=True)
class HostChipSpec(ChipSpec):
    """The host's CPU: a chip whose float figure is fp32 and that also says how many cores it has."""

    cores: Figure = NOT_PROBED

    def figures(self) -> dict[str, Figure]:
        return {
            "memory_gb": self.memory_gb,
            "memory_visible_mib": self.memory_visible_mib,
            "bandwidth_gbs": self.bandwidth_gbs,
            "fp32_tflops": self.fp16_tflops,
            "cores": self.cores,
        }


@dataclass(frozen=True)
class Topology:
    cpus: int  # logical CPUs this process may run on
    cores: int  # physical cores among them on the first NUMA node
    threads: int  # what vLLM's auto binding gives the engine's worker
    model: str  # /proc/cpuinfo's model name
    bf16: bool  # the CPU has bf16 instructions (not planned with: the CPU build runs float32 here)


@dataclass(frozen=True)
class HostProbe:
    topology: Topology
    fp32_flops: float
    matmul_seconds: float
    copy_bytes_s: float
    copy_seconds: float
    memory_bytes: int
    watts: float | None


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def topology(root: Path = Path("/"), allowed: list[int] | None = None) -> Topology:
    """The CPUs, cores and engine threads of this process (``allowed``: the CPUs it may run on, its affinity by
    default), from sysfs; each logical CPU counts as a core where sysfs does not say."""
    if allowed is None:
        allowed = (
            sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
        )
    sys_cpu = root / "sys/devices/system/cpu"

    def node(cpu: int) -> int:
        found = sorted((sys_cpu / f"cpu{cpu}").glob("node[0-9]*"))
        return int(found[0].name[4:]) if found else 0

    first = min(node(c) for c in allowed)
    cores: set[tuple[str, str]] = set()
    for cpu in allowed:
        if node(cpu) != first:
            continue
        topo = sys_cpu / f"cpu{cpu}" / "topology"
        package, core = _read(topo / "physical_package_id"), _read(topo / "core_id")
        cores.add((package.strip(), core.strip()) if package and core else ("cpu", str(cpu)))
    n = max(1, len(cores))
    info = _read(root / "proc/cpuinfo") or ""
    model = re.search(r"^model name\s*:\s*(.+)$", info, re.MULTILINE)
    flags = re.search(r"^flags\s*:\s*(.+)$", info, re.MULTILINE)
    flag_set = set(flags.group(1).split()) if flags else set()
    return Topology(
        cpus=len(allowed),
        cores=n,
        threads=n - 1 if n > 1 else n,
        model=model.group(1).strip() if model else "CPU",
        bf16=bool(flag_set & {"avx512_bf16", "amx_bf16", "bf16"}),
    )


def memory_bytes(root: Path = Path("/")) -> int:
    """MemTotal from /proc/meminfo, else the physical pages the C library reports."""
    m = re.search(r"^MemTotal:\s*(\d+)\s*kB", _read(root / "proc/meminfo") or "", re.MULTILINE)
    if m:
        return int(m.group(1)) * 1024
    return int(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


def available_memory_bytes(root: Path = Path("/")) -> int:
    """MemAvailable from /proc/meminfo (what this host can still allocate without swapping), else MemTotal."""
    m = re.search(r"^MemAvailable:\s*(\d+)\s*kB", _read(root / "proc/meminfo") or "", re.MULTILINE)
    return int(m.group(1)) * 1024 if m else memory_bytes(root)


def _best(run: Callable[[], object], budget_s: float) -> float:
    """The shortest of repeated calls of ``run`` (after an untimed first call): at least 3, at most 10, within the
    budget. The shortest, as a data sheet's peak: a shared host's other load only ever slows a call."""
    run()
    best, spent, reps = math.inf, 0.0, 0
    while reps < 3 or (spent < budget_s and reps < 10):
        t0 = time.perf_counter()
        run()
        took = time.perf_counter() - t0
        best, spent, reps = min(best, took), spent + took, reps + 1
    return best


@lru_cache(maxsize=4)
def probe(root: Path = Path("/")) -> HostProbe:
    """This host's figures, measured once per process (and root); PlatformRefusal without torch."""
    try:
        import torch
    except ImportError as e:
        raise PlatformRefusal(
            f"the {CARD} card is measured with torch, which is not installed ({e}): install the cpu extra"
        ) from None
    topo = topology(root)
    meter = rapl_meter(root / "sys/class/powercap")
    before = torch.get_num_threads()
    torch.set_num_threads(topo.threads)
    try:
        a, b = torch.randn(MATMUL_N, MATMUL_N), torch.randn(MATMUL_N, MATMUL_N)
        out = torch.empty(MATMUL_N, MATMUL_N)
        meter.read()  # the counter's first read starts the interval
        matmul_s = _best(lambda: torch.mm(a, b, out=out), PROBE_BUDGET_S)
        power = meter.read()
        src = torch.ones(COPY_BYTES // 4, dtype=torch.float32)
        dst = torch.empty_like(src)  # the untimed first copy touches its pages
        copy_s = _best(lambda: dst.copy_(src), PROBE_BUDGET_S / 2)
    finally:
        torch.set_num_threads(before)
    return HostProbe(
        topology=topo,
        fp32_flops=2 * MATMUL_N**3 / matmul_s,
        matmul_seconds=matmul_s,
        copy_bytes_s=2 * COPY_BYTES / copy_s,
        copy_seconds=copy_s,
        memory_bytes=memory_bytes(root),
        watts=power.watts if power is not None else None,
    )


def host_card(root: Path = Path("/")) -> Card:
    """The ``cpu-host`` card from this host's :func:`probe`."""
    p = probe(root)
    t = p.topology
    on = (
        f"on {t.threads} thread(s) ({t.cores} core(s) of {t.cpus} CPU(s); vLLM's auto binding keeps one for its"
        " scheduler)"
    )
    mem = f"MemTotal of /proc/meminfo on this host ({p.memory_bytes // 1024} kB)"
    slug = re.sub(r"[^a-z0-9]+", "-", t.model.lower()).strip("-") or "cpu"
    chip = HostChipSpec(
        key=f"{slug}-{t.cores}c",
        vendor=t.model,
        platform="cpu",
        memory_gb=Figure(p.memory_bytes / 1e9, "measured", mem),
        memory_visible_mib=Figure(p.memory_bytes // MIB, "measured", mem),
        bandwidth_gbs=Figure(
            p.copy_bytes_s / 1e9,
            "measured",
            f"torch copy of a {COPY_BYTES // MIB} MiB fp32 tensor {on}: best of several, {p.copy_seconds * 1e3:.1f}"
            " ms, bytes read + written",
        ),
        fp16_tflops=Figure(
            p.fp32_flops / 1e12,
            "measured",
            f"torch fp32 {MATMUL_N}x{MATMUL_N} matmul {on}: best of several, {p.matmul_seconds * 1e3:.1f} ms"
            " (the CPU build runs float32)",
        ),
        int8_tops=Figure(0, "unverified", "not measured: plans on the CPU build are unquantized (fp16 = float)"),
        bf16=t.bf16,
        quantizations=("fp16",),
        cores=Figure(t.cores, "measured", f"physical cores of the first NUMA node this process may use (sysfs); {on}"),
    )
    if p.watts is not None and p.watts > 0:
        power = Figure(p.watts, "measured", "RAPL package energy over the probe's matmuls (the whole package)")
    else:
        power = Figure(0, "unverified", "no RAPL counters readable on this host: no power figure")
    return Card(
        key=CARD,
        chip=chip,
        chips_per_card=1,
        power_w=power,
        cooling="the host's",
        interconnect="none: one engine on the host's cores",
    )

"""NVIDIA GPUs under vLLM's CUDA build.

Code here may assume an NVIDIA driver: it runs ``nvidia-smi`` (always with a timeout) for discovery, chip
ownership (``--query-compute-apps``) and telemetry, and imports torch (for ``torch.cuda``) only inside
:meth:`CudaPlatform.tiny_op`. It never initialises a CUDA context at import, and a host without the driver
(no nvidia-smi, or one that cannot reach the driver) is reported as such, never as a traceback.

Ids are nvidia-smi's GPU indexes. The launch environment sets ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` so that
``CUDA_VISIBLE_DEVICES`` counts GPUs in that same order (CUDA's default is fastest first).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from engine.platforms.interface import Platform
from engine.platforms.power import PowerMeter, nvml_meter
from engine.platforms.reports import Chip, DeviceReading, FailureStreak, Inventory, OpResult, Sampler, chip_readings
from engine.platforms.tools import DiscoveryError, ToolNotFound, run_tool

log = logging.getLogger(__name__)

GPU_FIELDS = (
    "index",
    "uuid",
    "name",
    "pci.bus_id",
    "temperature.gpu",
    "power.draw",
    "memory.used",
    "memory.total",
    "driver_version",
    "utilization.gpu",
)
APP_FIELDS = ("gpu_uuid", "pid", "used_memory")
_LOST = ("gpu is lost", "unknown error", "err!")


class NvidiaSmiError(DiscoveryError):
    """nvidia-smi failed or printed something we cannot read. The message names the fix."""


class NvidiaSmiNotFound(NvidiaSmiError, ToolNotFound):
    """No nvidia-smi on this machine (no NVIDIA driver, or not given to the container)."""


def run(args: Sequence[str], *, binary: str = "nvidia-smi", timeout_s: float = 15.0) -> str:
    """Run ``nvidia-smi ARGS`` and return stdout; every failure becomes an :class:`NvidiaSmiError`."""
    proc = run_tool(
        binary,
        args,
        timeout_s=timeout_s,
        fix="install the NVIDIA driver, or run the container with --gpus all (the NVIDIA container toolkit mounts "
        "nvidia-smi)",
        error=NvidiaSmiError,
        missing=NvidiaSmiNotFound,
    )
    if proc.returncode != 0:
        text = (proc.stdout or "") + (proc.stderr or "")
        tail = text.strip().splitlines()[-1:] or ["no output"]
        hint = (
            ": load the NVIDIA driver (nvidia-smi on the host), or give the container the GPUs with --gpus"
            if "communicate with the nvidia driver" in text.lower()
            else ""
        )
        raise NvidiaSmiError(f"'{' '.join(proc.args)}' exited with {proc.returncode}: {tail[0]}{hint}")
    return proc.stdout or ""


def _rows(text: str, width: int, what: str) -> list[list[str]]:
    rows = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != width:
            raise NvidiaSmiError(f"nvidia-smi {what} line {lineno}: expected {width} fields, got {line.strip()!r}")
        rows.append(cells)
    return rows


def _num(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None  # "[N/A]", "[Not Supported]"


def _int(text: str, what: str) -> int:
    value = _num(text)
    if value is None:
        raise NvidiaSmiError(f"nvidia-smi: expected {what}, got {text!r}")
    return int(value)


def parse_gpus(gpu_csv: str, apps_csv: str = "") -> Inventory:
    """The inventory from ``--query-gpu`` (fields :data:`GPU_FIELDS`) and ``--query-compute-apps``
    (:data:`APP_FIELDS`), both ``--format=csv,noheader,nounits``."""
    held: dict[str, list[tuple[int, int]]] = {}
    for uuid, pid, mem in _rows(apps_csv, len(APP_FIELDS), "--query-compute-apps"):
        held.setdefault(uuid, []).append((_int(pid, "a pid"), int(_num(mem) or 0)))
    chips = []
    driver = ""
    for cells in _rows(gpu_csv, len(GPU_FIELDS), "--query-gpu"):
        index, uuid, name, bus, temp, power, used, total, driver, _util = cells
        lost = any(m in c.lower() for c in cells for m in _LOST)
        procs = held.get(uuid, [])
        t = _num(temp)
        idx = _int(index, "a GPU index")
        chips.append(
            Chip(
                device_id=idx,
                npu_id=idx,
                chip_id=0,
                name=name,
                health="Lost" if lost else "OK",
                bus_id=bus,
                temp_c=int(t) if t is not None else None,
                power_w=_num(power),
                memory_used_mb=int(_num(used) or 0),
                memory_total_mb=int(_num(total) or 0),
                process_mb=sum(m for _, m in procs),
                pids=tuple(sorted({p for p, _ in procs})),
                place=f"GPU {idx}",
            )
        )
    if not chips:
        raise NvidiaSmiError("nvidia-smi lists no GPU: the driver sees no device (check nvidia-smi on the host)")
    return Inventory(driver_version=driver, chips=chips)


def get_gpu_count(binary: str = "nvidia-smi", timeout_s: float = 15.0) -> int:
    """GPUs nvidia-smi lists; :class:`NvidiaSmiError` when it lists none or fails (the detection probe)."""
    text = run(["--query-gpu=index", "--format=csv,noheader"], binary=binary, timeout_s=timeout_s)
    count = sum(1 for line in text.splitlines() if line.strip())
    if not count:
        raise NvidiaSmiError("nvidia-smi lists no GPU")
    return count


def _query(binary: str, timeout_s: float) -> Inventory:
    fmt = "--format=csv,noheader,nounits"
    gpus = run([f"--query-gpu={','.join(GPU_FIELDS)}", fmt], binary=binary, timeout_s=timeout_s)
    apps = run([f"--query-compute-apps={','.join(APP_FIELDS)}", fmt], binary=binary, timeout_s=timeout_s)
    return parse_gpus(gpus, apps)


class NvidiaSmiSampler:
    """Temperature, power and memory of this worker's GPUs from one nvidia-smi query; never raises."""

    def __init__(self, devices: Sequence[int] | None, *, binary: str = "nvidia-smi", timeout_s: float = 10.0) -> None:
        self.devices = set(devices) if devices is not None else None
        self.binary = binary
        self.timeout_s = timeout_s
        self._streak = FailureStreak(log)

    def sample(self) -> list[DeviceReading]:
        try:
            fmt = "--format=csv,noheader,nounits"
            inv = parse_gpus(
                run([f"--query-gpu={','.join(GPU_FIELDS)}", fmt], binary=self.binary, timeout_s=self.timeout_s)
            )
        except NvidiaSmiError as e:
            return self._streak.failed(e)
        self._streak.ended()
        return chip_readings(inv.chips, self.devices)


class CudaPlatform(Platform):
    name = "cuda"
    family = "CUDA"
    device_type = "cuda"
    device_control_env_var = "CUDA_VISIBLE_DEVICES"
    kubernetes_resource = "nvidia.com/gpu"  # NVIDIA's device plugin
    telemetry_source = "nvidia-smi"
    tool = "nvidia-smi"
    health_hint = "nvidia-smi -q -d ECC,PAGE_RETIREMENT"
    runtime = "torch.cuda"
    busy_mb = 1024  # an idle data-centre GPU shows a few MB in use
    supported_dtypes = ("auto", "float16", "bfloat16", "float32")
    memory_utilization_default = 0.90
    max_num_seqs_cap = 256
    kv_block_size = 16

    def discover(self) -> Inventory:
        return _query(self.nvidia_smi, self.timeout_s)

    def sampler(self, devices: Sequence[int] | None) -> Sampler:
        return NvidiaSmiSampler(devices, binary=self.nvidia_smi)

    def power_meter(self, devices: Sequence[int] | None) -> PowerMeter:
        """NVML's energy counters when pynvml and the driver are there; else nvidia-smi's power.draw."""
        return nvml_meter(devices) or super().power_meter(devices)

    def tiny_op(self) -> tuple[list[OpResult], str | None]:
        try:
            import torch
        except ImportError as e:
            return [], f"torch is not importable ({e}); the per-chip op check needs it"
        cuda: Any = torch.cuda
        try:
            count = int(cuda.device_count()) if cuda.is_available() else 0
        except Exception as e:  # driver trouble surfaces as RuntimeError subclasses
            return [], f"torch.cuda.device_count() failed: {e}"
        results = []
        for i in range(count):
            try:
                x = torch.arange(16, dtype=torch.float16, device=f"cuda:{i}")
                got = float((x + x).sum().cpu())
                free, total = cuda.mem_get_info(i)
                err = None if got == 240.0 else f"1+1 arithmetic came back wrong ({got} instead of 240)"
                results.append(OpResult(i, err, free // 2**20, total // 2**20))
            except Exception as e:
                results.append(OpResult(i, f"{type(e).__name__}: {e}"))
        return results, None

    def launch_env(self, device_ids: Sequence[int], tp: int) -> dict[str, str]:
        return {**super().launch_env(device_ids, tp), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}

    def compose_comment(self) -> str:
        return "# Each worker reserves only its own GPUs; the device ids are nvidia-smi's GPU indexes."

    def compose_devices(self, device_ids: Sequence[int]) -> list[str]:
        ids = ", ".join(f'"{i}"' for i in device_ids)
        return [
            "    deploy:",
            "      resources:",
            "        reservations:",
            "          devices:",
            "            - driver: nvidia",
            "              capabilities: [gpu]",
            f"              device_ids: [{ids}]",
        ]

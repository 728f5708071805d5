"""Ascend host facts for ``vlbatch doctor``: device nodes, driver mounts, CANN version, a tiny op per chip.

Paths follow the vllm-ascend 300I Duo ``docker run`` line: ``--device /dev/davinciN``,
``/dev/davinci_manager``, ``/dev/devmm_svm``, ``/dev/hisi_hdc``, and mounts for dcmi, npu-smi, the driver's
lib64 and version.info. torch_npu is imported only inside :func:`tiny_op_per_chip`.
"""

from __future__ import annotations

import logging
import platform
import re
from pathlib import Path

from engine.platforms.ascend_matrix import parse_cann_version
from engine.platforms.reports import OpResult

log = logging.getLogger(__name__)

CONTROL_NODES = ("/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc")
DRIVER_MOUNTS = (
    ("/usr/local/Ascend/driver/lib64", "-v /usr/local/Ascend/driver/lib64/:/usr/local/Ascend/driver/lib64/"),
    (
        "/usr/local/Ascend/driver/version.info",
        "-v /usr/local/Ascend/driver/version.info:/usr/local/Ascend/driver/version.info",
    ),
    ("/usr/local/dcmi", "-v /usr/local/dcmi:/usr/local/dcmi"),
)
_DAVINCI = re.compile(r"^davinci(\d+)$")


def _at(root: Path, path: str) -> Path:
    return root / path.lstrip("/")


def davinci_nodes(root: Path = Path("/")) -> list[int]:
    """The N of every ``/dev/davinciN`` (physical ids; they need not match npu-smi's Device ids)."""
    dev = _at(root, "/dev")
    try:
        names = [p.name for p in dev.iterdir()]
    except OSError:
        return []
    return sorted(int(m.group(1)) for n in names if (m := _DAVINCI.match(n)))


def missing_control_nodes(root: Path = Path("/")) -> list[str]:
    return [p for p in CONTROL_NODES if not _at(root, p).exists()]


def missing_driver_mounts(root: Path = Path("/")) -> list[tuple[str, str]]:
    """(path, the docker -v flag that provides it) for each driver path that is absent."""
    return [(p, flag) for p, flag in DRIVER_MOUNTS if not _at(root, p).exists()]


def cann_version(toolkit_home: Path | None, root: Path = Path("/")) -> tuple[str | None, str]:
    """(version, file it came from) from the first CANN version file found; (None, places looked)."""
    arch = f"{platform.machine()}-linux"
    homes = [toolkit_home] if toolkit_home else []
    homes += [_at(root, "/usr/local/Ascend/ascend-toolkit/latest"), _at(root, "/usr/local/Ascend/cann")]
    looked = []
    for home in homes:
        for f in (
            home / "version.cfg",
            home / arch / "ascend_toolkit_install.info",
            home / "ascend_toolkit_install.info",
        ):
            looked.append(str(f))
            try:
                version = parse_cann_version(f.read_text(errors="replace"))
            except OSError:
                continue
            if version:
                return version, str(f)
    return None, ", ".join(str(h) for h in homes)


def has_device_nodes(root: Path = Path("/")) -> bool:
    """Whether this host (or container) has any Ascend device node: the cheap "is there an NPU" probe."""
    return bool(davinci_nodes(root)) or _at(root, CONTROL_NODES[0]).exists()


def tiny_op_per_chip() -> tuple[list[OpResult], str | None]:
    """Add two small tensors on every visible chip. Returns (results, reason skipped or None)."""
    try:
        import torch
        import torch_npu  # registers the npu device with torch
    except ImportError as e:
        return [], f"torch_npu is not importable ({e}); the per-chip op check needs it"
    try:
        count = int(torch_npu.npu.device_count())
    except Exception as e:  # the runtime reports driver trouble as RuntimeError subclasses of its own
        return [], f"torch_npu.npu.device_count() failed: {e}"
    results = []
    for i in range(count):
        try:
            x = torch.arange(16, dtype=torch.float16, device=f"npu:{i}")
            got = float((x + x).sum().cpu())
            free, total = torch_npu.npu.mem_get_info(i)
            err = None if got == 240.0 else f"1+1 arithmetic came back wrong ({got} instead of 240)"
            results.append(OpResult(i, err, free // 2**20, total // 2**20))
        except Exception as e:
            results.append(OpResult(i, f"{type(e).__name__}: {e}"))
    return results, None

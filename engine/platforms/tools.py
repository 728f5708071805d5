"""Running a platform's vendor tool (npu-smi, nvidia-smi), and the refusals when it is missing, hangs or fails."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence

from vlbatch.errors import DEVICE_DISCOVERY_FAILED, DEVICE_TOOL_MISSING, VlbatchError


class DiscoveryError(VlbatchError):
    """The platform's tool is missing, failed, or printed something we cannot read. The message names the fix."""

    code = DEVICE_DISCOVERY_FAILED


class ToolNotFound(DiscoveryError):
    """The platform's tool (npu-smi, nvidia-smi) is not on this machine."""

    code = DEVICE_TOOL_MISSING


def run_tool(
    binary: str,
    args: Sequence[str],
    *,
    timeout_s: float,
    fix: str,
    error: type[DiscoveryError],
    missing: type[ToolNotFound],
) -> subprocess.CompletedProcess[str]:
    """Run a vendor tool (npu-smi, nvidia-smi) and return its process, whatever its exit status; a tool that is
    not on PATH raises ``missing`` with ``fix``, one that hangs or cannot start raises ``error``."""
    path = shutil.which(binary)
    if path is None:
        raise missing(f"{binary} not found on PATH: {fix}")
    cmd = [path, *args]
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired as e:
        raise error(f"'{' '.join(cmd)}' did not answer within {timeout_s:.0f}s: the driver may be hung") from e
    except OSError as e:
        raise error(f"cannot run {path}: {e}") from e

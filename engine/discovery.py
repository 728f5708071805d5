"""Which chips this host has and whether this worker may take them: the platform-neutral front.

The work is the platform's (``engine.platforms``): its tool lists the chips, and
:meth:`~engine.platforms.interface.Platform.check_assignment` compares them with the visibility variable and
the configured instances. Field failures it exists to catch: the chips are 0,1,4,5 but the configuration
says 0,1,2,3 (half the chips idle and nothing said so), and two engines on one chip, each sizing its KV
cache from the same free memory (invariant 8: devices are owned).
"""

from __future__ import annotations

from collections.abc import Sequence

from engine.platforms import current_platform, expected_by_packages
from engine.platforms.interface import Platform
from engine.platforms.reports import Chip, Finding, Inventory

__all__ = ["Chip", "Finding", "Inventory", "preflight"]


def preflight(
    *,
    visible: Sequence[int] | None,
    tensor_parallel_size: int,
    binary: str = "npu-smi",
    platform: str | Platform | None = None,
) -> list[Finding]:
    """Worker start (invariant 8): the chips this process was given exist, are healthy and are not held by
    another process; a finding with level "error" means refuse to start, and its message says the fix.

    ``platform``: a name (settings' ``VLBATCH_PLATFORM``) or instance; None detects it. A worker that names
    chips, or has a vendor's packages installed, is meant to own chips: on a host where none is detected it
    is checked as the default accelerator, so it refuses with what is missing instead of starting on CPU.
    ``binary`` is the npu-smi to run.
    """
    if isinstance(platform, Platform):
        p = platform
    else:
        required = visible is not None or bool(expected_by_packages())
        p = current_platform(platform, npu_smi=binary, require_accelerator=required)
    return p.preflight(visible, tensor_parallel_size)

"""The one pinned, validated Ascend software stack for the Atlas 300I Duo, and how to read what is installed.

Source of the pins: vllm-ascend ``docs/source/installation.md`` ("Atlas 300I DUO" tab) and
``docs/source/community/versioning_policy.md`` (release compatibility matrix), main @ 182b75ea
(2026-08-22): vllm-ascend v0.23.0 = vLLM v0.23.0, CANN 9.1.0, torch 2.10.0, torch_npu 2.10.0.post4,
NNAL 9.1.0, no triton. The docs give no driver/firmware number; they defer to the CANN 9.1.0 release
notes, so the driver is reported, not pinned.

Change the stack here and nowhere else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Pin:
    package: str  # distribution name (pip) or "cann"
    version: str
    note: str = ""


@dataclass(frozen=True)
class Stack:
    name: str
    source: str
    pins: tuple[Pin, ...]
    forbidden: tuple[str, ...] = ()  # distributions that must not be installed
    forbidden_modules: tuple[str, ...] = ()  # modules that must not be importable, by any install route
    driver: str | None = None  # None: not pinned by the source; reported only
    product: str = ""  # how messages name the hardware, e.g. "300I Duo"


ATLAS_300I_DUO = Stack(
    name="vllm-ascend v0.23.0 on Atlas 300I Duo",
    source="vllm-ascend docs installation.md (Atlas 300I DUO) + versioning_policy.md @ 182b75ea",
    pins=(
        Pin("cann", "9.1.0", "the 300I Duo (310P) CANN package; NNAL 9.1.0 beside it"),
        Pin("torch", "2.10.0"),
        Pin("torch-npu", "2.10.0.post4"),
        Pin("vllm", "0.23.0"),
        Pin("vllm-ascend", "0.23.0"),
    ),
    forbidden=("triton", "triton-ascend"),
    # Both distributions install the module `triton`; vLLM picks its triton kernels whenever it imports, which 310P
    # cannot run (the 300I DUO install table: "triton / triton-ascend: Not supported").
    forbidden_modules=("triton",),
    product="300I Duo",
)

_RUNNING = re.compile(r"^toolkit_running_version=\[[^:\]]*:([^\]]+)\]", re.M)
_INSTALL_INFO = re.compile(r"^version=(\S+)", re.M)


def parse_cann_version(text: str) -> str | None:
    """CANN version from ``version.cfg`` (``toolkit_running_version=[8.2.0.2.220:8.2.RC2]``) or from
    ``ascend_toolkit_install.info`` (``version=8.5.0``); None when neither line is there."""
    m = _RUNNING.search(text) or _INSTALL_INFO.search(text)
    return m.group(1).strip() if m else None


def _norm(version: str) -> str:
    # pip reports "2.10.0.post4"; wheels built from source add "+gitabc" or "+cpu" local tags.
    return version.split("+", 1)[0].strip().lower()


def matches(installed: str, pinned: str) -> bool:
    return _norm(installed) == _norm(pinned)

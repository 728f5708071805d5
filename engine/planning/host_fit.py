"""The engine arguments a host can start a model with, decided before anything is loaded.

Every command that starts an engine (``worker``, ``tag``, ``docs``, ``run-batch``, ``eval``, and ``doctor``, which
only predicts) takes its arguments through :func:`engine_for_host`:

- ``max_model_len`` unset is the model's own context (``engine.planning.context``), not a fixed figure the model
  may not have; a larger ask is refused (``context_over_model``) naming both values, where vLLM would refuse it
  after a minute of loading with a 160-line traceback.
- On a CPU host vLLM sizes the KV cache as ``gpu_memory_utilization`` (0.85) of all RAM: 19 of 23.5 GiB for a
  1M-parameter model, and a crash when less than that is free. So unless the operator sizes it
  (``kv_cache_memory_bytes`` or ``gpu_memory_utilization``), the KV cache is what ``max_num_seqs`` sequences of
  ``max_model_len`` tokens need, at most ``VLBATCH_CPU_KV_CACHE_SHARE`` of the memory available now, at least one
  full sequence (vLLM refuses to start with less); an unset ``max_model_len`` is lowered to what that share holds.
  An operator's size that cannot work is refused: more than the memory available (``kv_cache_over_memory``, vLLM's
  own check for the fraction, ``vllm/v1/worker/cpu_worker.py``), or less than one sequence (``kv_cache_too_small``).
- On a CPU host an unset ``dtype`` is the model's own when it is float32: vLLM's "auto" would halve a float32 model
  to bfloat16, which a CPU without bf16 instructions only emulates, and which changes a small model's answers.

On an accelerator the device's memory is profiled by the engine at load; only the context is decided here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from engine.planning.context import model_context
from vlbatch.errors import CONTEXT_OVER_MODEL, KV_CACHE_OVER_MEMORY, KV_CACHE_TOO_SMALL, VlbatchError
from vlbatch.settings import Settings

GiB = 1024**3
MIN_MODEL_LEN = 128  # EngineConfig's floor
LEN_STEP = 16  # a lowered max_model_len is a whole number of these (vLLM's smallest KV block)


class HostFitError(VlbatchError):
    """Engine arguments this host or model cannot start; the message names both values and the fix."""

    code = CONTEXT_OVER_MODEL


@dataclass(frozen=True)
class HostMemory:
    """A CPU host's memory as vLLM's CPU worker weighs it: all of it, and what is available now."""

    total: int
    available: int


def host_memory(settings: Settings) -> HostMemory | None:
    """This host's memory when it runs the CPU build of the engine; None on an accelerator."""
    from engine.platforms import current_platform
    from engine.platforms.cpu_host import available_memory_bytes, memory_bytes

    if current_platform(settings.devices.platform, npu_smi=settings.devices.npu_smi).accelerator:
        return None
    return HostMemory(total=memory_bytes(), available=available_memory_bytes())


def _gib(n: float) -> str:
    """A size for a message: GiB, or MiB below one GiB (a tiny model's cache would read 0.00 GiB)."""
    return f"{n / GiB:.2f} GiB" if n >= GiB else f"{n / 2**20:.1f} MiB"


def _model_dtype(model_dir: Path) -> str | None:
    try:
        cfg = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    value = cfg.get("torch_dtype") or cfg.get("dtype")
    return str(value) if value else None


def kv_bytes_per_token(model_dir: Path, dtype: str) -> int:
    """K and V of one token of ``model_dir`` on a CPU host at ``dtype`` (float32 4 bytes; vLLM's "auto" picks
    bfloat16 there, as half precision: 2)."""
    from engine.planning.shapes import read_model_config

    return read_model_config(model_dir).text.kv_bytes_per_token(dtype_bytes=4 if dtype == "float32" else 2)


def _operator_room(
    engine: dict[str, object], memory: HostMemory, kv: int | None, utilization: float
) -> tuple[int, str] | None:
    """The KV cache the operator sized (``kv``, or ``utilization`` when ``engine`` names it), as bytes and as words
    for a message; None when it is left to us. ``HostFitError`` when it is more than the memory available."""
    if kv is not None:
        if kv > memory.available:
            raise HostFitError(
                f"kv_cache_memory_bytes {kv} ({_gib(kv)}) is more than the {_gib(memory.available)} of memory "
                "available: lower it, or leave it unset to size it from the model",
                code=KV_CACHE_OVER_MEMORY,
            )
        return kv, f"kv_cache_memory_bytes {kv} ({_gib(kv)})"
    if "gpu_memory_utilization" in engine:
        wanted = int(memory.total * utilization)
        if wanted > memory.available:
            raise HostFitError(
                f"gpu_memory_utilization {utilization} of this host's {_gib(memory.total)} is {_gib(wanted)}, more "
                f"than the {_gib(memory.available)} available (on a CPU host vLLM reserves that share of all RAM): "
                f"lower it to {int(memory.available / memory.total * 90) / 100:.2f} or less, or leave it unset to "
                "size the KV cache from the model",
                code=KV_CACHE_OVER_MEMORY,
            )
        return wanted, f"gpu_memory_utilization {utilization} ({_gib(wanted)})"
    return None


def fit_engine(
    engine: dict[str, object], model_dir: Path, *, memory: HostMemory | None, share: float
) -> dict[str, object]:
    """``engine`` with what was left unset decided for ``model_dir`` on this host (``memory`` None: an accelerator);
    ``HostFitError`` when what was set cannot start."""
    from engine.runtime.config import EngineConfig

    fitted = dict(engine)
    own = model_context(model_dir)
    given = EngineConfig.model_validate({**engine, "model": str(model_dir)})  # typed: "16384" is 16384
    asked = given.max_model_len if engine.get("max_model_len") is not None else None
    if asked is not None and asked > own.tokens:
        raise HostFitError(
            f"max_model_len {asked} is above the model's own context, {own.tokens} ({own.source}): set "
            f"max_model_len to {own.tokens} or less in VLBATCH_ENGINE or --engine, or leave it unset"
        )
    if memory is None:
        if asked is None:  # EngineConfig's default, unless the model's own is shorter
            fitted["max_model_len"] = min(own.tokens, int(EngineConfig.model_fields["max_model_len"].default))
        return fitted
    if "dtype" not in engine and _model_dtype(model_dir) == "float32":
        fitted["dtype"] = "float32"
    config = EngineConfig.model_validate({**fitted, "max_model_len": asked or own.tokens, "model": str(model_dir)})
    per_token = kv_bytes_per_token(model_dir, config.dtype)
    operator = _operator_room(engine, memory, given.kv_cache_memory_bytes, config.gpu_memory_utilization)
    room = operator[0] if operator else int(memory.available * share)
    length = config.max_model_len
    if asked is None:
        length = min(own.tokens, room // per_token // LEN_STEP * LEN_STEP)
        fitted["max_model_len"] = length
    one_sequence = per_token * length
    if operator is not None and (one_sequence > room or length < MIN_MODEL_LEN):
        need = per_token * max(length, MIN_MODEL_LEN)
        fits = room // per_token // LEN_STEP * LEN_STEP
        lower = f", or lower max_model_len to {fits}" if fits >= MIN_MODEL_LEN else ""
        raise HostFitError(
            f"{operator[1]} cannot hold one sequence of max_model_len {max(length, MIN_MODEL_LEN)} ({_gib(need)} of "
            f"KV cache), which the engine refuses to start with: give it {need} bytes or more{lower}",
            code=KV_CACHE_TOO_SMALL,
        )
    if one_sequence > memory.available or length < MIN_MODEL_LEN:
        fix = (
            f"lower max_model_len to {memory.available // per_token // LEN_STEP * LEN_STEP} or less, or leave it unset"
            if asked
            else "free memory, or raise VLBATCH_CPU_KV_CACHE_SHARE"
        )
        raise HostFitError(
            f"one sequence of max_model_len {max(length, MIN_MODEL_LEN)} needs "
            f"{_gib(per_token * max(length, MIN_MODEL_LEN))} of KV cache, more than "
            f"{'the' if asked else f'VLBATCH_CPU_KV_CACHE_SHARE={share} of the'} {_gib(memory.available)} of "
            f"memory available: {fix}",
            code=KV_CACHE_OVER_MEMORY,
        )
    if operator is None:
        wanted = min(one_sequence * config.max_num_seqs, room)
        fitted["kv_cache_memory_bytes"] = max(wanted, one_sequence, 1 << 20)  # EngineConfig's own floor is 1 MiB
    return fitted


def engine_for_host(settings: Settings, model_dir: Path | str) -> Settings:
    """``settings`` with the engine arguments ``model_dir`` starts with on this host (module docstring);
    unchanged when ``model_dir`` is no model directory (``eval --compare`` takes results exports too)."""
    model_dir = Path(model_dir)
    if not (model_dir / "config.json").is_file():
        return settings
    engine = fit_engine(
        settings.runtime.engine, model_dir, memory=host_memory(settings), share=settings.runtime.cpu_kv_cache_share
    )
    return settings.model_copy(update={"engine": engine})

"""The KV cache of an engine a command runs in its own process on a CPU host (``vlbatch tag`` and its kin).

On a CPU host vLLM sizes the KV cache as ``gpu_memory_utilization`` of the host's RAM (19 of 23.5 GiB for a
1M-parameter model), which starves everything else on a laptop. So unless ``--engine`` or ``VLBATCH_ENGINE``
sizes it, ``cpu_engine`` sets ``kv_cache_memory_bytes`` from the model: what ``max_num_seqs`` sequences of
``max_model_len`` tokens need, at most ``VLBATCH_CPU_KV_CACHE_SHARE`` of the memory available now, at least one
full sequence (vLLM refuses to start with less). ``tag``, ``docs``, ``run-batch`` and ``eval`` (each model it runs)
take their engine arguments through it; ``demo`` fixes a small cache of its own.
"""

from __future__ import annotations

from pathlib import Path

from vlbatch.settings import Settings


def cpu_kv_cache_bytes(model_dir: Path, engine: dict[str, object], *, available: int, share: float) -> int:
    """The KV cache an engine of ``engine``'s arguments needs for ``model_dir``, within ``share`` of ``available``."""
    from engine.planning.shapes import read_model_config
    from engine.runtime.config import EngineConfig

    config = EngineConfig.model_validate({**engine, "model": str(model_dir)})
    # float32 unless half precision is asked for: what the CPU build runs ("auto" included, CpuPlatform.dtype).
    dtype_bytes = 2 if config.dtype in ("float16", "bfloat16") else 4
    per_token = read_model_config(model_dir).text.kv_bytes_per_token(dtype_bytes=dtype_bytes)
    one_sequence = per_token * config.max_model_len
    wanted = min(one_sequence * config.max_num_seqs, int(available * share))
    return max(wanted, one_sequence, 1 << 20)  # EngineConfig's own floor is 1 MiB


def cpu_engine(settings: Settings, model_dir: Path) -> Settings:
    """``settings`` with the KV cache sized for ``model_dir`` when this host runs the CPU build and neither
    ``--engine`` nor ``VLBATCH_ENGINE`` sized it (``kv_cache_memory_bytes`` or ``gpu_memory_utilization``)."""
    if {"kv_cache_memory_bytes", "gpu_memory_utilization"} & settings.engine.keys():
        return settings
    if not (model_dir / "config.json").is_file():
        return settings  # not a model directory (eval's --compare takes results exports too)
    from engine.platforms import current_platform
    from engine.platforms.cpu_host import available_memory_bytes

    if current_platform(settings.platform, npu_smi=settings.npu_smi).accelerator:
        return settings
    kv = cpu_kv_cache_bytes(
        model_dir, settings.engine, available=available_memory_bytes(), share=settings.cpu_kv_cache_share
    )
    return settings.model_copy(update={"engine": {**settings.engine, "kv_cache_memory_bytes": kv}})

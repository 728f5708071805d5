"""Engine arguments that matter on 310P and elsewhere. Every field has a default and a constraint."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from engine.runtime.stub import StubConfig
from engine.vision import model_takes_video


class EngineConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str = Field(description="Model directory (weights, config, tokenizer, processor).")
    dtype: Literal["auto", "float16", "bfloat16", "float32"] = Field(
        "auto", description="310P supports float16 only; CPU runs float32/bfloat16."
    )
    tensor_parallel_size: int = Field(1, ge=1, le=16, description="Chips per engine; 1 when the model fits.")
    max_model_len: int = Field(4096, ge=128, description="Context length (Qwen3-VL on 310P: at most 16k).")
    gpu_memory_utilization: float = Field(
        0.85, gt=0, le=0.95, description="Fraction of device memory (of RAM on CPU); 0.85-0.88 on 310P."
    )
    max_num_seqs: int = Field(64, ge=1, le=1024, description="Concurrent sequences in the engine.")
    max_num_batched_tokens: int | None = Field(None, ge=128, description="Tokens per engine step.")
    limit_images_per_prompt: int = Field(4, ge=0, le=64, description="limit_mm_per_prompt for images.")
    limit_videos_per_prompt: int = Field(
        1, ge=0, le=16, description="limit_mm_per_prompt for videos (models with a video processor only)."
    )
    mm_processor_kwargs: dict[str, Any] = Field(default_factory=dict, description="Processor options.")
    kv_cache_memory_bytes: int | None = Field(
        None,
        ge=1 << 20,
        description="Fixed KV-cache size; skips memory profiling (useful on CPU, where the fraction is of RAM).",
    )
    enable_prefix_caching: bool = Field(True, description="Reuse the shared system prefix's KV.")
    enforce_eager: bool = Field(False, description="Skip graph capture (faster start, slower decode).")
    seed: int = Field(0, description="Sampling seed.")
    admit_ahead: int | None = Field(
        None,
        ge=0,
        le=4096,
        description="Requests handed to the engine beyond max_num_seqs, so a finished sequence is replaced within "
        "the engine's own step (default max(4, max_num_seqs // 2)). The rest wait, prepared, in the runner.",
    )
    backend: Literal["vllm", "stub"] = Field(
        "vllm",
        description="What the runner feeds: vLLM, or the stub engine (engine/runtime/stub.py, docs/stub-engine.md), "
        "which answers without a model and fails on cue, for testing pipelines and workers without loading one.",
    )
    stub: StubConfig = Field(
        default_factory=StubConfig,
        description="The stub engine's answers and faults (backend 'stub' only): a fixed answer or the smallest "
        "instance of the request's JSON schema, token counts from the prompt's length, poisons (seeds, prompt "
        "markers, image colours) and image crashes that kill it, hangs, slow steps and a gate file.",
    )
    extra: dict[str, Any] = Field(default_factory=dict, description="Further vllm.LLM keyword arguments.")

    @model_validator(mode="after")
    def _cross_checks(self) -> EngineConfig:
        if "stub" in self.model_fields_set and self.backend != "stub":
            raise ValueError(f'a "stub" section is given with backend={self.backend!r}: set "backend": "stub"')
        if self.max_num_batched_tokens is not None and self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError(
                f"max_num_batched_tokens={self.max_num_batched_tokens} is below "
                f"max_num_seqs={self.max_num_seqs}: each sequence needs one token per step"
            )
        return self

    @property
    def admission_limit(self) -> int:
        """Requests the runner keeps inside the engine: ``max_num_seqs`` running plus a ready few waiting."""
        ahead = self.admit_ahead if self.admit_ahead is not None else max(4, self.max_num_seqs // 2)
        return self.max_num_seqs + ahead

    def mm_limits(self) -> dict[str, int]:
        """Inputs per prompt by kind; videos only for a model whose processor takes them."""
        limits = {"image": self.limit_images_per_prompt}
        if self.limit_videos_per_prompt and model_takes_video(self.model):
            limits["video"] = self.limit_videos_per_prompt
        return limits

    def llm_kwargs(self) -> dict[str, Any]:
        kw: dict[str, Any] = {
            "model": self.model,
            "dtype": self.dtype,
            "tensor_parallel_size": self.tensor_parallel_size,
            "max_model_len": self.max_model_len,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "max_num_seqs": self.max_num_seqs,
            "limit_mm_per_prompt": self.mm_limits(),
            "enable_prefix_caching": self.enable_prefix_caching,
            "enforce_eager": self.enforce_eager,
            "seed": self.seed,
            # Compact JSON: without this a weak model pads structured output with whitespace.
            "structured_outputs_config": {"backend": "xgrammar", "disable_any_whitespace": True},
        }
        if self.max_num_batched_tokens is not None:
            kw["max_num_batched_tokens"] = self.max_num_batched_tokens
        if self.kv_cache_memory_bytes is not None:
            kw["kv_cache_memory_bytes"] = self.kv_cache_memory_bytes
        if self.mm_processor_kwargs:
            kw["mm_processor_kwargs"] = self.mm_processor_kwargs
        kw.update(self.extra)
        return kw

"""What a benchmark run measures: the model, the photos, the tagging options and the engine, for all arms."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from engine.runtime.config import EngineConfig
from pipelines.image_tagging import TaggingOptions

# Every arm, in the order they are reported. The registry (``arms.ARMS``) holds those implemented.
ARM_NAMES = ("raw", "embedded", "service", "serve_c1", "serve_c32")

# The engine every arm runs: CPU-friendly, a fixed KV size (no profiling), no graph capture.
DEFAULT_ENGINE: dict[str, Any] = {
    "dtype": "float32",
    "max_model_len": 2048,
    "kv_cache_memory_bytes": 1 << 30,
    "enforce_eager": True,
    "max_num_seqs": 64,
}

MODEL_KINDS = ("tiny", "reference")


class BenchSpec(BaseModel):
    """One benchmark run. Frozen: derive variants with ``with_changes``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str = Field("tiny", description="'tiny', 'reference' (generated) or a model directory.")
    n_photos: int = Field(200, ge=1, le=100_000, description="Timed photos (warm-up photos come on top).")
    photo_size: tuple[int, int] = Field((1600, 1200), description="Width and height of every generated photo.")
    max_tags: int = Field(5, ge=1, le=100)
    max_visual_tokens: int = Field(256, ge=4, le=16384)
    images_per_prompt: int = Field(1, ge=1, le=64)
    caption: bool = False
    engine: dict[str, Any] = Field(default_factory=lambda: dict(DEFAULT_ENGINE))
    chunk_size: int = Field(32, ge=1, le=10_000, description="Items per chunk (embedded and service arms).")
    arms: tuple[str, ...] = ARM_NAMES
    pg_admin_url: str = "postgresql://127.0.0.1:5432/test"
    redis_url: str = "redis://127.0.0.1:6379/14"
    warmup_items: int = Field(4, ge=0, le=1000, description="Untimed items each arm runs first.")
    preprocess_threads: int = Field(4, ge=1, le=64, description="Threads loading and resizing photos.")
    work_dir: Path | None = Field(None, description="Where the inputs are written (and reused); a temp dir if None.")
    seed: int = 0

    @field_validator("photo_size")
    @classmethod
    def _size_positive(cls, v: tuple[int, int]) -> tuple[int, int]:
        if v[0] < 28 or v[1] < 28:
            raise ValueError(f"photo size {v[0]}x{v[1]} is below 28x28")
        return v

    @field_validator("engine")
    @classmethod
    def _engine_checked(cls, v: dict[str, Any]) -> dict[str, Any]:
        EngineConfig.model_validate({**v, "model": "-"})  # the same checks every arm's engine gets
        return dict(v)

    def with_changes(self, **changes: Any) -> BenchSpec:
        """A validated copy with ``changes``; ``max_num_seqs`` goes into the engine arguments."""
        data = self.model_dump()
        if "max_num_seqs" in changes:
            data["engine"] = {**data["engine"], "max_num_seqs": changes.pop("max_num_seqs")}
        return BenchSpec.model_validate({**data, **changes})

    @property
    def max_num_seqs(self) -> int:
        return int(self.engine.get("max_num_seqs", EngineConfig.model_fields["max_num_seqs"].default))

    @property
    def model_name(self) -> str:
        """The served model name every arm uses."""
        return self.model if self.model in MODEL_KINDS else Path(self.model).name

    def tagging_options(self) -> TaggingOptions:
        return TaggingOptions(
            max_tags=self.max_tags,
            max_visual_tokens=self.max_visual_tokens,
            images_per_prompt=self.images_per_prompt,
            caption=self.caption,
        )

    def engine_args(self) -> dict[str, Any]:
        """The engine dict every arm passes on (``VLBATCH_ENGINE`` for a worker), room for the burst included."""
        args = dict(self.engine)
        limit = int(args.get("limit_images_per_prompt", EngineConfig.model_fields["limit_images_per_prompt"].default))
        args["limit_images_per_prompt"] = max(limit, self.images_per_prompt)
        return args

    def engine_config(self, model_dir: Path) -> EngineConfig:
        return EngineConfig.model_validate({**self.engine_args(), "model": str(model_dir)})

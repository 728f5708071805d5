"""The one typed settings object. Environment variables use the prefix ``VLBATCH_``; ``.env`` is read."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Annotated

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="VLBATCH_", env_file=".env", env_nested_delimiter="__", extra="ignore")

    database_url: str = Field(
        "sqlite:///./vlbatch.db",
        description="SQLAlchemy URL; PostgreSQL as postgresql+psycopg://user@host/db.",
    )
    broker_url: str = Field("redis://127.0.0.1:6379/0", description="Celery broker (Redis).")
    model_path: str | None = Field(None, description="Model directory served by this worker.")
    model_name: str | None = Field(None, description="Served model name; defaults to the directory name.")
    allowed_input_roots: Annotated[list[Path], NoDecode] = Field(
        default_factory=list,
        description="Server-side directories jobs may read from (comma separated in the environment).",
    )
    chunk_size: int = Field(32, ge=1, le=10_000, description="Items per chunk (one task message).")
    lease_seconds: int = Field(600, ge=5, description="How long a claimed chunk stays owned.")
    url_timeout_s: float = Field(10.0, gt=0, description="Timeout for fetching an image URL.")
    max_input_bytes: int = Field(50 * 1024 * 1024, ge=1, description="Size cap for one input file.")
    engine: dict[str, object] = Field(
        default_factory=dict,
        description='Engine arguments (see engine.config.EngineConfig), e.g. VLBATCH_ENGINE=\'{"dtype": "float16"}\'.',
    )
    preprocess_threads: int = Field(4, ge=1, le=64, description="Threads decoding and resizing images.")
    worker_concurrency: int = Field(2, ge=1, le=8, description="Chunks in flight per engine worker.")
    reconcile_interval_s: float = Field(30.0, gt=0, description="How often workers look for lost chunks.")
    max_items_per_job: int = Field(5_000_000, ge=1, description="Largest job accepted.")

    @field_validator("allowed_input_roots", mode="before")
    @classmethod
    def _split_roots(cls, value: object) -> object:
        if isinstance(value, str):
            return [Path(p.strip()) for p in value.split(",") if p.strip()]
        return value

    @property
    def served_model_name(self) -> str | None:
        if self.model_name:
            return self.model_name
        return Path(self.model_path).name if self.model_path else None


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()

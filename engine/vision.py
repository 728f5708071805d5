"""The vision geometry of a served model, read from its processor config (no vllm import needed).

Qwen2-VL / Qwen2.5-VL use 14-pixel patches merged 2x2 (one token per 28x28 square); Qwen3-VL uses
16-pixel patches (32x32). Preprocessing resizes to this grid so the token count is known up front.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class VisionGeometry:
    patch_size: int = 14
    merge_size: int = 2
    min_pixels: int = 4 * 28 * 28
    max_pixels: int = 16384 * 28 * 28

    @property
    def factor(self) -> int:
        """Side of the pixel square that becomes one LLM token."""
        return self.patch_size * self.merge_size

    @classmethod
    def from_model_dir(cls, model_dir: str | Path) -> VisionGeometry:
        """Read ``preprocessor_config.json``; defaults (Qwen2-VL) when the file or a field is absent."""
        path = Path(model_dir) / "preprocessor_config.json"
        if not path.is_file():
            return cls()
        cfg = json.loads(path.read_text())
        size = cfg.get("size") or {}
        patch = int(cfg.get("patch_size", cls.patch_size))
        merge = int(cfg.get("merge_size", cfg.get("spatial_merge_size", cls.merge_size)))
        factor = patch * merge
        return cls(
            patch_size=patch,
            merge_size=merge,
            min_pixels=int(cfg.get("min_pixels") or size.get("shortest_edge") or 4 * factor * factor),
            max_pixels=int(cfg.get("max_pixels") or size.get("longest_edge") or 16384 * factor * factor),
        )

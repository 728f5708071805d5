"""The vision geometry of a served model, read from its processor config (no vllm import needed).

Qwen2-VL / Qwen2.5-VL use 14-pixel patches merged 2x2 (one token per 28x28 square); Qwen3-VL uses
16-pixel patches (32x32). Preprocessing resizes to this grid so the token count is known up front.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


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
        patch, merge = _patch_and_merge(cfg, cls.patch_size, cls.merge_size)
        return cls(
            patch_size=patch,
            merge_size=merge,
            min_pixels=_pixels(cfg, "min_pixels", "shortest_edge", 4 * (patch * merge) ** 2),
            max_pixels=_pixels(cfg, "max_pixels", "longest_edge", 16384 * (patch * merge) ** 2),
        )


def _patch_and_merge(cfg: dict[str, Any], patch: int, merge: int) -> tuple[int, int]:
    """A processor config's patch and merge sizes (``spatial_merge_size`` in some), else the given defaults."""
    return int(cfg.get("patch_size", patch)), int(cfg.get("merge_size", cfg.get("spatial_merge_size", merge)))


def _pixels(cfg: dict[str, Any], key: str, size_key: str, default: int) -> int:
    """A pixel bound: the processor reads ``min_pixels``/``max_pixels`` over ``size`` (its backward-compatible
    keys win), then its own default."""
    return int(cfg.get(key) or (cfg.get("size") or {}).get(size_key) or default)


@dataclass(frozen=True)
class VideoGeometry:
    """How the served model's video processor cuts a clip (Qwen2-VL / Qwen2.5-VL / Qwen3-VL): frames of
    ``factor``-pixel squares, and ``temporal_patch_size`` consecutive frames merged into one set of tokens (a
    clip of an odd count is padded with its last frame, as the processor does).

    ``cap_pixels_per_frame`` is the processor's own bound on a whole clip's pixels: each frame at most an
    even share of ``max_video_tokens`` (90% of them, ``temporal_patch_size`` frames per share), floored
    at 1.05 x ``min_pixels``.
    """

    patch_size: int = 14
    merge_size: int = 2
    temporal_patch_size: int = 2
    min_pixels: int = 128 * 28 * 28  # the video processor's own defaults
    max_pixels: int = 768 * 28 * 28
    cap_pixels_per_frame: bool = False
    max_video_tokens: int = 128000

    @property
    def factor(self) -> int:
        return self.patch_size * self.merge_size

    def frame_max_pixels(self, n_frames: int) -> int:
        """The largest frame the processor leaves as it is in a clip of ``n_frames`` frames."""
        if not self.cap_pixels_per_frame:
            return self.max_pixels
        total = int(self.max_video_tokens * self.factor * self.factor * 0.9)
        return max(
            min(self.max_pixels, total * self.temporal_patch_size // max(1, n_frames)), int(self.min_pixels * 1.05)
        )

    @classmethod
    def from_model_dir(cls, model_dir: str | Path) -> VideoGeometry | None:
        """The model's video processor (``video_preprocessor_config.json``, else the image processor's file
        when ``config.json`` names a video token); None when the model takes no video."""
        root = Path(model_dir)
        video_file = root / "video_preprocessor_config.json"
        if video_file.is_file():
            cfg = json.loads(video_file.read_text())
        else:
            config = root / "config.json"
            takes_video = config.is_file() and "video_token_id" in json.loads(config.read_text())
            image_file = root / "preprocessor_config.json"
            if not takes_video or not image_file.is_file():
                return None
            cfg = json.loads(image_file.read_text())
        patch, merge = _patch_and_merge(cfg, cls.patch_size, cls.merge_size)
        return cls(
            patch_size=patch,
            merge_size=merge,
            temporal_patch_size=int(cfg.get("temporal_patch_size", cls.temporal_patch_size)),
            min_pixels=_pixels(cfg, "min_pixels", "shortest_edge", 128 * (patch * merge) ** 2),
            max_pixels=_pixels(cfg, "max_pixels", "longest_edge", 768 * (patch * merge) ** 2),
            cap_pixels_per_frame=bool(cfg.get("cap_pixels_per_frame") or False),
            max_video_tokens=int(cfg.get("max_video_tokens") or cls.max_video_tokens),
        )


def model_takes_video(model_dir: str | Path) -> bool:
    return VideoGeometry.from_model_dir(model_dir) is not None

"""Read a model's ``config.json`` into the shapes the planner needs: layers, heads, KV heads, head_dim, parameters.

Handles text models with flat fields (Qwen2/Qwen3/Llama), and vision-language models whose text part is either
flat (Qwen2-VL, Qwen2.5-VL) or under ``text_config`` (Qwen3-VL, Gemma 3), with a ``vision_config``. Parameter
counts are computed from the shapes, the way the modelling code builds its layers, so they can be checked
against published totals. Pure Python: no transformers, no torch.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from vlbatch.errors import MODEL_CONFIG_INVALID, VlbatchError

VisionKind = Literal["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "generic"]
_TEXT_REQUIRED = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size")
# Qwen2-family attention has q/k/v biases without saying so in config.json (no ``attention_bias`` key).
_QKV_BIAS_TYPES = {"qwen2", "qwen2_vl", "qwen2_5_vl", "qwen2_5_vl_text", "qwen2_vl_text"}


class ModelConfigError(VlbatchError):
    """config.json is missing, unreadable, or lacks a field the planner needs; the message names it."""

    code = MODEL_CONFIG_INVALID


@dataclass(frozen=True)
class TextShape:
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied_embeddings: bool
    qkv_bias: bool
    qk_norm: bool
    max_position: int | None = None

    @property
    def q_dim(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    def linear_params_per_layer(self) -> int:
        """Weights of the quantizable linears of one decoder layer (q, k, v, o, gate, up, down)."""
        attn = self.hidden * self.q_dim + 2 * self.hidden * self.kv_dim + self.q_dim * self.hidden
        return attn + 3 * self.hidden * self.intermediate

    def other_params_per_layer(self) -> int:
        """Norms, biases and q/k norms: kept in float by W8A8."""
        extra = 2 * self.hidden
        if self.qkv_bias:
            extra += self.q_dim + 2 * self.kv_dim
        if self.qk_norm:
            extra += 2 * self.head_dim
        return extra

    @property
    def linear_params(self) -> int:
        return self.layers * self.linear_params_per_layer()

    @property
    def embedding_params(self) -> int:
        """Input embedding plus the output head when it is not tied (both stay float under W8A8)."""
        return self.vocab * self.hidden * (1 if self.tied_embeddings else 2)

    @property
    def params(self) -> int:
        return self.linear_params + self.layers * self.other_params_per_layer() + self.embedding_params + self.hidden

    def kv_bytes_per_token(self, *, tp: int = 1, dtype_bytes: int = 2) -> int:
        """K and V for one token on one rank; KV heads are split by TP, or replicated when TP exceeds them."""
        heads_per_rank = max(1, self.kv_heads // tp) if tp <= self.kv_heads else 1
        return 2 * self.layers * heads_per_rank * self.head_dim * dtype_bytes


@dataclass(frozen=True)
class VisionShape:
    kind: VisionKind
    depth: int
    hidden: int
    intermediate: int
    heads: int
    patch_size: int
    merge: int
    temporal_patch: int
    out_hidden: int
    deepstack: int
    position_embeddings: int
    full_attention_layers: int
    window_patches: int

    def block_params(self) -> int:
        h, i = self.hidden, self.intermediate
        attn = 3 * h * h + 3 * h + h * h + h
        if self.kind == "qwen2_5_vl":
            # SwiGLU MLP with biases and two RMSNorms.
            return attn + 2 * (h * i + i) + i * h + h + 2 * h
        # fc1/fc2 MLP with biases and two LayerNorms (weight and bias).
        return attn + h * i + i + i * h + h + 4 * h

    def merger_params(self) -> int:
        m = self.hidden * self.merge * self.merge
        return m * m + m + m * self.out_hidden + self.out_hidden + 2 * self.hidden

    @property
    def params(self) -> int:
        patch = 3 * self.temporal_patch * self.patch_size * self.patch_size * self.hidden
        positions = self.position_embeddings * self.hidden
        mergers = (1 + self.deepstack) * self.merger_params()
        return patch + positions + self.depth * self.block_params() + mergers

    def patches_per_image(self, visual_tokens: int) -> int:
        """Vision-transformer patches behind ``visual_tokens`` LLM tokens (each token merges merge x merge patches)."""
        return visual_tokens * self.merge * self.merge

    def flops_per_image(self, visual_tokens: int) -> float:
        """Matmul FLOPs of the vision tower for one image: 2 x params x patches plus attention scores."""
        p = self.patches_per_image(visual_tokens)
        dense = 2.0 * (self.depth * self.block_params() + self.merger_params() * (1 + self.deepstack)) * p
        windowed = self.depth - self.full_attention_layers
        span = min(p, self.window_patches) if self.window_patches else p
        attn = 4.0 * self.hidden * p * (self.full_attention_layers * p + windowed * span)
        return dense + attn


@dataclass(frozen=True)
class ModelShape:
    name: str
    architecture: str
    model_type: str
    text: TextShape
    vision: VisionShape | None

    @property
    def params(self) -> int:
        return self.text.params + (self.vision.params if self.vision else 0)


def _need(cfg: dict[str, Any], keys: tuple[str, ...], where: str, path: str) -> None:
    missing = [k for k in keys if not isinstance(cfg.get(k), int) or isinstance(cfg.get(k), bool)]
    if missing:
        raise ModelConfigError(
            f"{path}: {where} lacks {', '.join(missing)} (integers); the planner needs "
            f"{', '.join(keys)} to size weights and KV cache"
        )


def _text_part(cfg: dict[str, Any]) -> dict[str, Any]:
    for key in ("text_config", "llm_config", "language_config"):
        sub = cfg.get(key)
        if isinstance(sub, dict) and "hidden_size" in sub:
            return sub
    return cfg


def _vision(vc: dict[str, Any], text_hidden: int, path: str) -> VisionShape:
    if "embed_dim" in vc:
        # Qwen2-VL: embed_dim is the ViT width, hidden_size is the LLM width it projects to.
        _need(vc, ("embed_dim", "depth", "num_heads"), "vision_config", path)
        h = vc["embed_dim"]
        kind: VisionKind = "qwen2_vl"
        inter = int(h * float(vc.get("mlp_ratio", 4)))
        out = int(vc.get("hidden_size", text_hidden))
    else:
        depth_key = "depth" if "depth" in vc else "num_hidden_layers"
        heads_key = "num_heads" if "num_heads" in vc else "num_attention_heads"
        _need(vc, (depth_key, "hidden_size", "intermediate_size", heads_key), "vision_config", path)
        h = vc["hidden_size"]
        inter = vc["intermediate_size"]
        out = int(vc.get("out_hidden_size", text_hidden))
        if "deepstack_visual_indexes" in vc:
            kind = "qwen3_vl"
        elif "fullatt_block_indexes" in vc or vc.get("model_type") == "qwen2_5_vl":
            kind = "qwen2_5_vl"
        else:
            kind = "generic"
    depth = int(vc.get("depth", vc.get("num_hidden_layers", 0)))
    patch = int(vc.get("patch_size", vc.get("spatial_patch_size", 14)))
    full = len(vc.get("fullatt_block_indexes", [])) if kind == "qwen2_5_vl" else depth
    window = int(vc.get("window_size", 0)) // patch
    return VisionShape(
        kind=kind,
        depth=depth,
        hidden=int(h),
        intermediate=int(inter),
        heads=int(vc.get("num_heads", vc.get("num_attention_heads", 16))),
        patch_size=patch,
        merge=int(vc.get("spatial_merge_size", 2 if kind != "generic" else 1)),
        temporal_patch=int(vc.get("temporal_patch_size", 2 if kind != "generic" else 1)),
        out_hidden=out,
        deepstack=len(vc.get("deepstack_visual_indexes", [])),
        position_embeddings=int(vc.get("num_position_embeddings", 0)),
        full_attention_layers=full,
        window_patches=window * window,
    )


def shape_from_dict(cfg: dict[str, Any], *, name: str = "model", path: str = "config.json") -> ModelShape:
    """Shapes from a parsed config.json; ``ModelConfigError`` names any missing field."""
    text = _text_part(cfg)
    where = "text_config" if text is not cfg else "config.json"
    _need(text, _TEXT_REQUIRED, where, path)
    for key in ("num_experts", "n_routed_experts", "num_local_experts"):
        if text.get(key):
            raise ModelConfigError(
                f"{path}: {key}={text[key]}: mixture-of-experts models are not modelled by the planner yet "
                "(decode reads only the active experts, so the dense formulas would overstate its cost)"
            )
    heads = text["num_attention_heads"]
    kv_heads = text.get("num_key_value_heads") or heads
    head_dim = text.get("head_dim") or text["hidden_size"] // heads
    model_type = str(cfg.get("model_type", text.get("model_type", "")))
    text_type = str(text.get("model_type", model_type))
    tied = cfg.get("tie_word_embeddings", text.get("tie_word_embeddings", False))
    if "attention_bias" in text:
        qkv_bias = bool(text["attention_bias"])
    else:
        qkv_bias = text_type in _QKV_BIAS_TYPES or model_type in _QKV_BIAS_TYPES
    text_shape = TextShape(
        layers=text["num_hidden_layers"],
        hidden=text["hidden_size"],
        heads=heads,
        kv_heads=int(kv_heads),
        head_dim=int(head_dim),
        intermediate=text["intermediate_size"],
        vocab=text["vocab_size"],
        tied_embeddings=bool(tied),
        qkv_bias=qkv_bias,
        qk_norm=text_type.startswith("qwen3") or model_type.startswith("qwen3"),
        max_position=text.get("max_position_embeddings")
        if isinstance(text.get("max_position_embeddings"), int)
        else None,
    )
    vc = cfg.get("vision_config")
    vision = _vision(vc, text_shape.hidden, path) if isinstance(vc, dict) else None
    archs = cfg.get("architectures") or [model_type or "unknown"]
    return ModelShape(name=name, architecture=str(archs[0]), model_type=model_type, text=text_shape, vision=vision)


def read_model_config(path: Path | str) -> ModelShape:
    """Read ``path`` (a config.json or the model directory holding one)."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    try:
        cfg = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ModelConfigError(f"{p}: no such file; pass a model directory or its config.json") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ModelConfigError(f"{p}: cannot read it ({e})") from e
    except json.JSONDecodeError as e:
        raise ModelConfigError(f"{p}: not valid JSON ({e})") from e
    if not isinstance(cfg, dict):
        raise ModelConfigError(f"{p}: expected a JSON object, got {type(cfg).__name__}")
    name = p.parent.name if p.name == "config.json" else p.stem
    return shape_from_dict(cfg, name=name or "model", path=str(p))

"""Device memory of one engine rank: the engine's own accounting (exact) and the estimates it is fed with.

``gpu_memory_utilization x total - weights - peak activation - non-torch increase`` is what the KV cache gets
(halved by vllm-ascend's 310P worker since v0.18); weights are exact arithmetic on config.json, the activation
peak and the non-torch bytes are estimates of what the engine measures in its profile run.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from engine.planning.request import PlanRequest, Quantization
from engine.planning.shapes import ModelShape
from engine.platforms import Platform

GIB = 1024**3
MIB = 1024**2


# ---- the engine's memory accounting (exact) -------------------------------------------------------------------


def kv_cache_bytes(
    *,
    total_bytes: int,
    utilization: float,
    weights_bytes: int,
    activation_bytes: int,
    non_torch_bytes: int,
    halved: bool,
) -> int:
    """Bytes the engine hands to the KV cache; negative when the model does not fit."""
    free = int(total_bytes * utilization) - weights_bytes - activation_bytes - non_torch_bytes
    return free // 2 if halved and free > 0 else free


def kv_tokens(kv_bytes: int, *, bytes_per_token: int, block_size: int) -> int:
    """Whole blocks only, as the block allocator rounds down."""
    if kv_bytes <= 0:
        return 0
    return (kv_bytes // (bytes_per_token * block_size)) * block_size


# ---- estimates ------------------------------------------------------------------------------------------------


def weight_bytes(shape: ModelShape, quantization: Quantization) -> int:
    """Weight bytes of the whole model. W8A8/W4A8 quantize the decoder's linears; embeddings, lm_head, norms and
    the vision tower stay fp16 (ModelSlim marks embed/lm_head FLOAT). Per-channel scales are counted as
    weight_scale+weight_offset (fp32) + deq_scale (int64) + quant_bias (int32) = 20 bytes per output channel."""
    t = shape.text
    float_params = shape.params - t.linear_params
    if quantization == "fp16":
        return shape.params * 2
    # Output channels of q, k, v, o, gate, up, down: scales are per output channel.
    out_channels = t.layers * (t.q_dim + 2 * t.kv_dim + t.hidden + 2 * t.intermediate + t.hidden)
    if quantization == "w8a8":
        return t.linear_params + 20 * out_channels + float_params * 2
    # W4A8: two weights per byte plus an fp16 scale per group of 256.
    return t.linear_params // 2 + t.linear_params // 128 + float_params * 2


_LINEAR = re.compile(
    r"layers\.(\d+)\.(?:self_attn|mlp)\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)\.weight$"
)


def described_linears(description: Mapping[str, object]) -> dict[tuple[int, str], str]:
    """(layer, linear) -> quant type (W8A8, W8A8_DYNAMIC, FLOAT, ...) from a ModelSlim quant_model_description.json;
    vision-tower entries are skipped (their shapes differ and they are counted as fp16 anyway)."""
    found: dict[tuple[int, str], str] = {}
    for key, value in description.items():
        m = _LINEAR.search(key)
        if m and "visual" not in key and isinstance(value, str):
            found[(int(m.group(1)), m.group(2))] = value.upper()
    return found


def described_weight_bytes(shape: ModelShape, quantization: Quantization, description: Mapping[str, object]) -> int:
    """Weight bytes when the checkpoint says which decoder linears are quantized and which stay FLOAT. Linears the
    file does not list are taken as ``quantization``."""
    t = shape.text
    sizes = {
        "q_proj": (t.hidden * t.q_dim, t.q_dim),
        "k_proj": (t.hidden * t.kv_dim, t.kv_dim),
        "v_proj": (t.hidden * t.kv_dim, t.kv_dim),
        "o_proj": (t.q_dim * t.hidden, t.hidden),
        "gate_proj": (t.hidden * t.intermediate, t.intermediate),
        "up_proj": (t.hidden * t.intermediate, t.intermediate),
        "down_proj": (t.intermediate * t.hidden, t.hidden),
    }
    listed = described_linears(description)
    total = (shape.params - t.linear_params) * 2
    for layer in range(t.layers):
        for name, (params, out_ch) in sizes.items():
            kind = listed.get((layer, name), quantization.upper())
            if kind.startswith("W8A8"):
                total += params + 20 * out_ch
            elif kind.startswith("W4A8"):
                total += params // 2 + params // 128
            else:
                total += params * 2
    return total


def activation_bytes(
    shape: ModelShape,
    req: PlanRequest,
    *,
    tp: int,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    platform: Platform,
) -> int:
    """Peak activation of the engine's profile run (an estimate), plus what the platform's attention allocates
    per max_model_len (the 310P's max_model_len^2 causal mask)."""
    t = shape.text
    mask = platform.attention_mask_bytes(req.max_model_len)
    per_token = 2 * (6 * t.hidden + (4 * t.intermediate + t.q_dim + 2 * t.kv_dim) // tp)
    logits = 2 * max_num_seqs * t.vocab * 4
    vision = 0
    if shape.vision and req.images_per_prompt and req.visual_tokens_per_image:
        v = shape.vision
        p = req.images_per_prompt * v.patches_per_image(req.visual_tokens_per_image)
        span = min(p, v.window_patches) if v.window_patches and v.full_attention_layers < v.depth else p
        vision = p * (12 * v.hidden + 2 * v.intermediate) * 2 // tp + (v.heads // tp or 1) * p * span * 2
    return mask + max_num_batched_tokens * per_token + logits + vision + 256 * MIB


def non_torch_bytes(tp: int) -> int:
    """Runtime allocations outside torch that appear during the profile run (HCCL buffers when TP > 1)."""
    return 512 * MIB if tp > 1 else 128 * MIB

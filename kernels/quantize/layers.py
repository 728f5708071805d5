"""Turn calibrated float linears into W8A8 layers (optionally smoothed), with the reference kernels."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from kernels import smooth, w8a8
from kernels.quantize.calibrate import LayerStats
from kernels.quantize.plan import Checkpoint, shared_input_group
from kernels.quantize_errors import QuantizeError


@dataclass(frozen=True)
class QuantLayer:
    prefix: str
    ascend: w8a8.W8A8Linear  # the seven 310P tensors (fp16 scales)
    weight_scale32: torch.Tensor  # (N, 1) float32, for the compressed-tensors export
    bias: torch.Tensor | None  # float bias as in the checkpoint (kept beside quant_bias)
    smooth: torch.Tensor | None  # (K,) migration scales, None when not smoothed
    sample: torch.Tensor  # calibration inputs (rows, K), before smoothing
    float_weight: torch.Tensor  # the module's own float weight (N, K), not a copy


def build(
    ckpt: Checkpoint,
    linears: dict[str, torch.nn.Linear],
    stats: dict[str, LayerStats],
    *,
    smooth_alpha: float | None,
    on_layer: Callable[[int], None] | None = None,
) -> tuple[dict[str, QuantLayer], dict[str, torch.Tensor]]:
    """All W8A8 layers, plus the migration scales s by producer tensor name (the exporter divides it by s).
    ``on_layer(1)`` after each layer is quantized (a progress bar)."""
    groups: dict[str, list[str]] = {}
    producers: dict[str, str] = {}
    for prefix in stats:
        g = shared_input_group(prefix)
        key = g[0] if g else prefix
        groups.setdefault(key, []).append(prefix)
        if g:
            producers[key] = g[1]
    layers: dict[str, QuantLayer] = {}
    rewritten: dict[str, torch.Tensor] = {}
    for key, members in groups.items():
        # q/k/v (gate/up) read one tensor: one range, so vLLM's fused qkv_proj gets one input_scale.
        cmin = torch.stack([stats[p].cmin for p in members]).amin(dim=0)
        cmax = torch.stack([stats[p].cmax for p in members]).amax(dim=0)
        s: torch.Tensor | None = None
        producer = producers.get(key)
        if smooth_alpha is not None and producer is not None:
            siblings = [p for p in _group_members(ckpt, key) if p not in members]
            if siblings:
                raise QuantizeError(
                    f"cannot smooth {key}: {siblings[0]} reads the same input but is kept float; "
                    "quantize the whole group or drop --smooth-alpha"
                )
            if producer not in ckpt.tensors:
                raise QuantizeError(f"cannot smooth {key}: no {producer} in the checkpoint to fold 1/s into")
            weights = [linears[p].weight.detach() for p in members]
            s = smooth.smooth_scales(
                torch.maximum(cmin.abs(), cmax.abs()), smooth.weight_absmax(*weights), smooth_alpha
            )
            rewritten[producer] = s
        lo = float((cmin / s).min()) if s is not None else float(cmin.min())
        hi = float((cmax / s).max()) if s is not None else float(cmax.max())
        act = w8a8.act_quant_params(lo, hi)
        for p in members:
            mod = linears[p]
            wf = mod.weight.detach().to(torch.float32)
            w_used = smooth.scale_weight_inputs(wf, s) if s is not None else wf
            bias = mod.bias.detach().to(torch.float32) if mod.bias is not None else None
            layer = w8a8.make_w8a8_linear(w_used, bias, act)
            _, scale32 = w8a8.quantize_weight_per_channel(w_used)
            layers[p] = QuantLayer(p, layer, scale32, bias, s, stats[p].sample(), mod.weight.detach())
            if on_layer is not None:
                on_layer(1)
    return layers, rewritten


def _group_members(ckpt: Checkpoint, key: str) -> list[str]:
    out = []
    for name in ckpt.tensors:
        if name.endswith(".weight"):
            prefix = name[: -len(".weight")]
            g = shared_input_group(prefix)
            if g and g[0] == key:
                out.append(prefix)
    return out


def forward_310p(layer: QuantLayer, x: torch.Tensor) -> torch.Tensor:
    """What the 310P computes for this layer, fp16 output, on the unsmoothed float input."""
    xs = x / layer.smooth if layer.smooth is not None else x
    return w8a8.w8a8_linear(xs, layer.ascend, out_dtype=torch.float16)

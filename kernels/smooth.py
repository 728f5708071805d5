"""SmoothQuant-style scale migration (Xiao et al. 2022): move activation outliers into the weights.

For a linear y = x W^T with per-input-channel activation absmax a_j and weight absmax w_j,
``s_j = a_j**alpha / w_j**(1 - alpha)``; then ``y = (x / s) (W * s)^T`` exactly in real arithmetic, while
x / s has flatter channels, so a per-tensor activation scale wastes fewer INT8 levels. The 1/s is
folded into whatever produces x (an RMSNorm weight, or the rows of a preceding linear), so inference
pays nothing for it.
"""

from __future__ import annotations

import torch

from kernels.quantize_errors import QuantizeError

# Floor on both sides of the ratio: a channel that is always zero must not produce 0 or inf scales.
EPS = 1e-5


def smooth_scales(act_absmax: torch.Tensor, weight_absmax: torch.Tensor, alpha: float = 0.5) -> torch.Tensor:
    """Per-input-channel migration scales s (K,), float32."""
    if not 0.0 <= alpha <= 1.0:
        raise QuantizeError(f"smoothing alpha={alpha} is outside [0, 1]; 0.5 is the usual choice")
    if act_absmax.shape != weight_absmax.shape or act_absmax.dim() != 1:
        raise QuantizeError(
            f"act_absmax {tuple(act_absmax.shape)} and weight_absmax {tuple(weight_absmax.shape)} must be the same (K,)"
        )
    a = act_absmax.to(torch.float32).clamp(min=EPS)
    w = weight_absmax.to(torch.float32).clamp(min=EPS)
    return (a.pow(alpha) / w.pow(1.0 - alpha)).clamp(min=EPS)


def weight_absmax(*weights: torch.Tensor) -> torch.Tensor:
    """Per-input-channel absmax over every linear that reads the same activation (e.g. q, k and v)."""
    return torch.stack([w.detach().to(torch.float32).abs().amax(dim=0) for w in weights]).amax(dim=0)


def scale_weight_inputs(weight: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """W (N, K) -> W * s along K: the consumer side of the migration."""
    return (weight.to(torch.float32) * s.to(torch.float32)).to(weight.dtype)

"""How far the W8A8 model is from the float one: per linear layer, per decoder layer, and at the logits."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from kernels.quantize.calibrate import Loaded, batches
from kernels.quantize.layers import QuantLayer, forward_310p
from kernels.quantize.plan import Checkpoint, QuantizeOptions


@dataclass(frozen=True)
class LinearError:
    prefix: str
    shape: tuple[int, int]  # (N, K)
    input_scale: float
    input_offset: int
    cosine: float
    rel_error: float  # ||y_q - y|| / ||y||


@dataclass(frozen=True)
class ModelError:
    hidden_cosine: list[float]  # per hidden state (embeddings, then after each decoder layer): worst sample
    logits_cosine: float  # worst sample
    top1_agreement: float  # over every position of every sample


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    a64, b64 = a.reshape(-1).to(torch.float64), b.reshape(-1).to(torch.float64)
    na, nb = a64.norm(), b64.norm()
    if na == 0 and nb == 0:
        return 1.0
    if na == 0 or nb == 0:
        return 0.0
    return float(a64 @ b64 / (na * nb))


def linear_errors(layers: dict[str, QuantLayer]) -> list[LinearError]:
    """Each layer on its own calibration inputs: float weight vs the 310P W8A8 reference forward."""
    out = []
    for prefix, layer in layers.items():
        x = layer.sample
        want = x @ layer.float_weight.to(torch.float32).t()
        if layer.bias is not None:
            want = want + layer.bias
        got = forward_310p(layer, x).to(torch.float32)
        rel = float((got - want).norm() / want.norm()) if want.norm() > 0 else float((got - want).norm())
        out.append(
            LinearError(
                prefix,
                (layer.float_weight.shape[0], layer.float_weight.shape[1]),
                float(layer.ascend.input_scale),
                int(layer.ascend.input_offset),
                cosine(got, want),
                rel,
            )
        )
    return out


def model_error(
    loaded: Loaded,
    ckpt: Checkpoint,
    opts: QuantizeOptions,
    layers: dict[str, QuantLayer],
    forward: Callable[[QuantLayer, torch.Tensor], torch.Tensor] = forward_310p,
) -> ModelError:
    """The whole model twice per sample, float and with every quantized linear replaced by ``forward``."""
    runs: list[tuple[tuple[torch.Tensor, ...], torch.Tensor]] = []
    with torch.inference_mode():
        for batch in batches(loaded, ckpt, opts):
            out = loaded.model(**batch, output_hidden_states=True)
            runs.append((tuple(h.clone() for h in out.hidden_states), out.logits.clone()))
    handles = []
    for prefix, layer in layers.items():

        def hook(
            _m: torch.nn.Module, args: tuple[torch.Tensor, ...], _out: torch.Tensor, layer: QuantLayer = layer
        ) -> torch.Tensor:
            return forward(layer, args[0]).to(args[0].dtype)

        handles.append(loaded.linears[prefix].register_forward_hook(hook))
    hidden_cos: list[float] | None = None
    logits_cos, agree, total = 1.0, 0, 0
    try:
        with torch.inference_mode():
            for (ref_hidden, ref_logits), batch in zip(runs, batches(loaded, ckpt, opts), strict=True):
                out = loaded.model(**batch, output_hidden_states=True)
                cos = [cosine(a, b) for a, b in zip(out.hidden_states, ref_hidden, strict=True)]
                hidden_cos = cos if hidden_cos is None else [min(a, b) for a, b in zip(hidden_cos, cos, strict=True)]
                logits_cos = min(logits_cos, cosine(out.logits, ref_logits))
                agree += int((out.logits.argmax(-1) == ref_logits.argmax(-1)).sum())
                total += ref_logits.shape[:-1].numel()
    finally:
        for h in handles:
            h.remove()
    return ModelError(hidden_cos or [], logits_cos, agree / max(total, 1))

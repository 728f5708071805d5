"""W8A8 reference kernels: the exact arithmetic of vllm-ascend's 310P static W8A8 linear, in plain torch.

The 310P path (vllm_ascend/_310p/quantization/methods/w8a8_static.py) does, per linear layer:

    x_q = saturate_int8(round(x * (1 / input_scale) + input_offset))        # npu_quantize, div_mode=False
    acc = x_q @ weight.T                                                      # int8 x int8 -> int32 (Cube)
    y   = fp16((acc + quant_bias) * deq_scale)                                # npu_quant_matmul fixpipe

with ``weight`` int8 (N, K) quantized per output channel, symmetric; ``input_scale`` (1,) fp16 and
``input_offset`` (1,) int8 per tensor; ``deq_scale = input_scale * weight_scale`` (N,) stored as int64
whose low 32 bits are the float32 bit pattern; and ``quant_bias`` (N,) int32 that folds both the float
bias and the activation offset: ``round(bias / deq_scale) - input_offset * sum_k weight[n, k]``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kernels.quantize_errors import QuantizeError

INT8_MIN, INT8_MAX = -128, 127
# Weights use [-127, 127]: a symmetric grid keeps -w representable and the scale exactly absmax / 127.
WEIGHT_QMAX = 127
# npu_trans_quant_param keeps the top 19 bits of the float32 scale (sign, exponent, 10 mantissa bits):
# the fixpipe multiplies by that truncated value (op-plugin test_npu_trans_quant_param "模拟硬件").
HW_SCALE_MASK = 0xFFFFE000
# ... and sets bit 46 in the uint64 it hands npu_quant_matmul (same test).
HW_SCALE_FLAG = 1 << 46


@dataclass(frozen=True)
class ActQuant:
    """Per-tensor asymmetric activation quantization: x ~= scale * (x_q - offset)."""

    scale: torch.Tensor  # (1,) float (fp16 in the 310P checkpoint)
    offset: torch.Tensor  # (1,) int8


@dataclass(frozen=True)
class W8A8Linear:
    """The tensors vllm-ascend's 310P W8A8 (static) scheme loads for one linear layer."""

    weight: torch.Tensor  # (N, K) int8
    weight_scale: torch.Tensor  # (N, 1) float
    weight_offset: torch.Tensor  # (N, 1) float, zeros (symmetric)
    input_scale: torch.Tensor  # (1,) float
    input_offset: torch.Tensor  # (1,) int8
    deq_scale: torch.Tensor  # (N,) int64, low 32 bits = float32 bits
    quant_bias: torch.Tensor  # (N,) int32


def quantize_weight_per_channel(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-output-channel INT8: returns (int8 (N, K), float32 scale (N, 1))."""
    if w.dim() != 2:
        raise QuantizeError(f"weight must be 2-D (out, in), got shape {tuple(w.shape)}; flatten conv weights first")
    wf = w.detach().to(torch.float32)
    if not torch.isfinite(wf).all():
        raise QuantizeError("weight has NaN/Inf values; fix the checkpoint before quantizing")
    absmax = wf.abs().amax(dim=1, keepdim=True)
    # An all-zero row quantizes to zeros under any scale; 1.0 keeps deq_scale finite and non-zero.
    scale = torch.where(absmax > 0, absmax / WEIGHT_QMAX, torch.ones_like(absmax))
    q = torch.clamp(torch.round(wf / scale), -WEIGHT_QMAX, WEIGHT_QMAX).to(torch.int8)
    return q, scale


def act_quant_params(lo: float, hi: float, *, scale_dtype: torch.dtype = torch.float16) -> ActQuant:
    """Per-tensor asymmetric INT8 parameters from a calibrated range [lo, hi] (0 is always inside).

    The scale is rounded to ``scale_dtype`` first (fp16 on 310P) and the offset is derived from the
    rounded scale, so that what the checkpoint stores is exactly what the calibration meant.
    """
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    if not (torch.isfinite(torch.tensor([lo, hi])).all()):
        raise QuantizeError(f"activation range [{lo}, {hi}] is not finite; check the calibration inputs")
    span = hi - lo
    # A layer that only ever saw zeros: any scale works; pick a tiny normal fp16 one.
    raw = span / (INT8_MAX - INT8_MIN) if span > 0 else 1e-3
    scale = torch.tensor([raw], dtype=torch.float32).to(scale_dtype)
    if float(scale) == 0.0 or not torch.isfinite(scale).all():
        raise QuantizeError(
            f"activation range [{lo}, {hi}] gives scale {raw} that {scale_dtype} cannot hold; "
            "enable smoothing (--smooth-alpha) or keep this layer in float (--keep-float)"
        )
    offset = round(INT8_MIN - lo / float(scale))
    offset = max(INT8_MIN, min(INT8_MAX, offset))
    return ActQuant(scale=scale, offset=torch.tensor([offset], dtype=torch.int8))


def quantize_activation(x: torch.Tensor, scale: torch.Tensor, offset: torch.Tensor) -> torch.Tensor:
    """npu_quantize(x, 1/scale, offset, qint8, div_mode=False): multiply by the reciprocal, round half to even.

    The reciprocal is taken in the scale's own dtype, as vllm-ascend builds ``aclnn_input_scale_reciprocal``
    from the fp16 parameter; the product and rounding are done in float32 here.
    """
    recip = (1.0 / scale).to(torch.float32)
    y = x.to(torch.float32) * recip + offset.to(torch.float32)
    return torch.clamp(torch.round(y), INT8_MIN, INT8_MAX).to(torch.int8)


def encode_deq_scale(scale: torch.Tensor) -> torch.Tensor:
    """float32 scale -> int64 holding its bit pattern in the low 32 bits (ModelSlim checkpoint convention)."""
    bits = scale.detach().to(torch.float32).contiguous().view(torch.int32).to(torch.int64)
    return bits & 0xFFFFFFFF


def decode_deq_scale(deq: torch.Tensor, *, hardware: bool = False) -> torch.Tensor:
    """int64 deq_scale -> float32; ``hardware=True`` applies the fixpipe's 19-bit truncation."""
    if deq.dtype != torch.int64:
        raise QuantizeError(f"deq_scale must be int64 bit patterns, got {deq.dtype}; use encode_deq_scale")
    bits = deq & (HW_SCALE_MASK if hardware else 0xFFFFFFFF)
    # Reinterpret the low 32 bits: values above 2**31 wrap to negative int32, which is the same bit pattern.
    bits32 = torch.where(bits >= 2**31, bits - 2**32, bits).to(torch.int32)
    return bits32.view(torch.float32)


def trans_quant_param(scale: torch.Tensor) -> torch.Tensor:
    """What torch_npu.npu_trans_quant_param returns for a float32 scale: masked bits with the bit-46 flag."""
    return (encode_deq_scale(scale) & HW_SCALE_MASK) | HW_SCALE_FLAG


def int8_matmul(x_q: torch.Tensor, w_q: torch.Tensor) -> torch.Tensor:
    """INT8 (M, K) x INT8 (N, K)^T -> INT32 (M, N), as the Cube unit accumulates."""
    if x_q.dtype != torch.int8 or w_q.dtype != torch.int8:
        raise QuantizeError(f"int8_matmul needs int8 operands, got {x_q.dtype} and {w_q.dtype}")
    if x_q.shape[-1] != w_q.shape[-1]:
        raise QuantizeError(f"K mismatch: activations {tuple(x_q.shape)} vs weight {tuple(w_q.shape)} (N, K)")
    # |acc| <= K * 128 * 128; int32 holds it for K < 131072, which every real hidden size meets.
    if x_q.shape[-1] >= 2**31 // (128 * 128):
        raise QuantizeError(f"K={x_q.shape[-1]} can overflow the int32 accumulator; split the reduction")
    return torch.matmul(x_q.to(torch.int32), w_q.to(torch.int32).t())


def quant_matmul(
    x_q: torch.Tensor,
    w_q: torch.Tensor,
    deq_scale: torch.Tensor,
    quant_bias: torch.Tensor | None = None,
    *,
    out_dtype: torch.dtype = torch.float16,
    hardware_scale: bool = True,
) -> torch.Tensor:
    """npu_quant_matmul(x_q, w_q.T, deq_scale, bias=quant_bias, output_dtype=...) in reference form."""
    acc = int8_matmul(x_q, w_q)
    if quant_bias is not None:
        acc = acc + quant_bias.to(torch.int32)
    scale = decode_deq_scale(deq_scale, hardware=hardware_scale)
    return (acc.to(torch.float32) * scale).to(out_dtype)


def make_w8a8_linear(
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    act: ActQuant,
    *,
    param_dtype: torch.dtype = torch.float16,
) -> W8A8Linear:
    """All seven 310P tensors of one linear layer from its float weight/bias and activation range."""
    w_q, w_scale = quantize_weight_per_channel(weight)
    in_scale = act.scale.to(param_dtype)
    # The device multiplies by the stored (param_dtype) scales, so derive deq_scale from those.
    w_scale_p = w_scale.to(param_dtype)
    deq = in_scale.to(torch.float32) * w_scale_p.to(torch.float32).flatten()
    correction = act.offset.to(torch.int64) * w_q.to(torch.int64).sum(dim=1)
    fbias = torch.zeros(w_q.shape[0]) if bias is None else bias.detach().to(torch.float32)
    qbias = torch.round(fbias / deq).to(torch.int64) - correction
    if qbias.abs().max() >= 2**31:
        raise QuantizeError(
            f"quant_bias overflows int32 (max {int(qbias.abs().max())}): the bias is huge next to "
            "input_scale * weight_scale; keep this layer in float (--keep-float)"
        )
    return W8A8Linear(
        weight=w_q,
        weight_scale=w_scale_p,
        weight_offset=torch.zeros_like(w_scale_p),
        input_scale=in_scale,
        input_offset=act.offset.to(torch.int8),
        deq_scale=encode_deq_scale(deq),
        quant_bias=qbias.to(torch.int32),
    )


def w8a8_linear(
    x: torch.Tensor, layer: W8A8Linear, *, out_dtype: torch.dtype = torch.float16, hardware_scale: bool = True
) -> torch.Tensor:
    """The 310P static W8A8 forward of one layer on float input of shape (..., K)."""
    lead = x.shape[:-1]
    x_q = quantize_activation(x.reshape(-1, x.shape[-1]), layer.input_scale, layer.input_offset)
    y = quant_matmul(
        x_q, layer.weight, layer.deq_scale, layer.quant_bias, out_dtype=out_dtype, hardware_scale=hardware_scale
    )
    return y.reshape(*lead, y.shape[-1])

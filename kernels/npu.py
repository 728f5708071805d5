"""Device implementations through torch_npu (Ascend 310P / 910B). Imported lazily, inside each function.

Each function takes and returns CPU tensors, mirroring its reference in ``w8a8``/``nz`` argument for
argument, so the parity harness can compare them directly. The calls follow vllm-ascend's 310P
W8A8 static scheme: npu_quantize with the reciprocal scale (div_mode=False), the weight cast to
FRACTAL_NZ then transposed, npu_quant_matmul with the int64 deq_scale and the int32 quant_bias.
"""

from __future__ import annotations

from typing import Any

import torch

from kernels.nz import ACL_FORMAT_FRACTAL_NZ, ACL_FORMAT_ND

_DEV = "npu"


def _torch_npu() -> Any:
    # Importing torch_npu registers the "npu" device on torch.
    import torch_npu

    return torch_npu


def available() -> bool:
    """True when torch_npu imports and sees at least one NPU."""
    try:
        _torch_npu()
    except ImportError:
        return False
    npu = getattr(torch, "npu", None)
    return bool(npu is not None and npu.is_available() and npu.device_count() > 0)


def quantize_activation(x: torch.Tensor, scale: torch.Tensor, offset: torch.Tensor) -> torch.Tensor:
    tnpu = _torch_npu()
    k = x.shape[-1]
    recip = (1.0 / scale).repeat(k).to(_DEV)
    off = offset.repeat(k).to(scale.dtype).to(_DEV)
    out = tnpu.npu_quantize(x.to(scale.dtype).to(_DEV), recip, off, torch.qint8, -1, False)
    return out.cpu()


def quant_matmul(
    x_q: torch.Tensor,
    w_q: torch.Tensor,
    deq_scale: torch.Tensor,
    quant_bias: torch.Tensor | None = None,
    *,
    out_dtype: torch.dtype = torch.float16,
    hardware_scale: bool = True,
) -> torch.Tensor:
    del hardware_scale  # the device always applies its own scale precision
    tnpu = _torch_npu()
    weight = tnpu.npu_format_cast(w_q.to(_DEV), ACL_FORMAT_FRACTAL_NZ).transpose(0, 1)
    bias = quant_bias.to(_DEV) if quant_bias is not None else None
    out = tnpu.npu_quant_matmul(x_q.to(_DEV), weight, deq_scale.to(_DEV), bias=bias, output_dtype=out_dtype)
    return out.cpu()


def trans_quant_param(scale: torch.Tensor) -> torch.Tensor:
    return _torch_npu().npu_trans_quant_param(scale.to(torch.float32).to(_DEV)).cpu()


def nz_roundtrip(x: torch.Tensor) -> torch.Tensor:
    """ND -> FRACTAL_NZ -> ND on the device; the NZ storage itself is not readable from torch."""
    tnpu = _torch_npu()
    nz = tnpu.npu_format_cast(x.to(_DEV), ACL_FORMAT_FRACTAL_NZ)
    if tnpu.get_npu_format(nz) != ACL_FORMAT_FRACTAL_NZ:
        raise RuntimeError(f"npu_format_cast did not produce FRACTAL_NZ (got format {tnpu.get_npu_format(nz)})")
    return tnpu.npu_format_cast(nz, ACL_FORMAT_ND).cpu()

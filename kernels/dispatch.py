"""Pick each kernel's device implementation when an NPU is present, its reference otherwise."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

from kernels import npu, nz, w8a8


def _reference_nz_roundtrip(x: Any) -> Any:
    return nz.unpack_nz(nz.pack_nz(x), *x.shape)


# name -> (reference, device). The device side is only ever called when npu.available() is true.
KERNELS: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {
    "quantize_activation": (w8a8.quantize_activation, npu.quantize_activation),
    "quant_matmul": (w8a8.quant_matmul, npu.quant_matmul),
    "trans_quant_param": (w8a8.trans_quant_param, npu.trans_quant_param),
    "nz_roundtrip": (_reference_nz_roundtrip, npu.nz_roundtrip),
}


@cache
def has_npu() -> bool:
    """Probed once per process: importing torch_npu is slow and its answer does not change."""
    return npu.available()


def get(name: str, *, device: bool | None = None) -> Callable[..., Any]:
    """The implementation of kernel ``name``; ``device=None`` means "the NPU one if there is an NPU"."""
    if name not in KERNELS:
        raise KeyError(f"unknown kernel {name!r}; known: {', '.join(sorted(KERNELS))}")
    reference, on_device = KERNELS[name]
    use_device = has_npu() if device is None else device
    return on_device if use_device else reference

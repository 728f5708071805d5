"""FRACTAL_NZ pack/unpack: the Cube unit's layout for a 2-D matrix, as npu_format_cast(..., 29) produces it.

CANN (ATB TransdataOperation) states the shapes: ND ``(m, n)`` becomes NZ ``(n1, m1*m0, n0)`` with
``m0 = 16`` rows per fractal and ``n0 = 32 bytes / itemsize`` columns (16 for fp16, 32 for int8); m and n
are zero-padded up to those multiples. E.g. fp16 ND (100, 30) -> NZ (2, 112, 16). Inside, each fractal
is a row-major ("z") 16 x n0 block, and fractals are laid out column of fractals by column ("N").

vllm-ascend casts the int8 weight (N, K) to NZ on 310P (``maybe_trans_nz``) and then passes its
transpose to npu_quant_matmul; that transpose is a view over the same NZ storage.
"""

from __future__ import annotations

import torch

from kernels.quantize_errors import QuantizeError

ACL_FORMAT_ND = 2
ACL_FORMAT_FRACTAL_NZ = 29
M0 = 16
FRACTAL_BYTES_PER_ROW = 32


def n0_for(dtype: torch.dtype) -> int:
    """Columns per fractal: 32 bytes of the element type (fp16 -> 16, int8 -> 32)."""
    size = torch.empty((), dtype=dtype).element_size()
    if FRACTAL_BYTES_PER_ROW % size:
        raise QuantizeError(f"{dtype} ({size} bytes) does not tile a 32-byte fractal row; use int8/fp16/fp32")
    return FRACTAL_BYTES_PER_ROW // size


def nz_shape(m: int, n: int, dtype: torch.dtype) -> tuple[int, int, int]:
    """The NZ shape (n1, m1*m0, n0) of an ND (m, n) matrix."""
    n0 = n0_for(dtype)
    return (-(-n // n0), -(-m // M0) * M0, n0)


def pack_nz(x: torch.Tensor) -> torch.Tensor:
    """ND (m, n) -> NZ (n1, m1*m0, n0), zero padded."""
    if x.dim() != 2:
        raise QuantizeError(f"pack_nz takes a 2-D matrix, got shape {tuple(x.shape)}; batch it yourself")
    m, n = x.shape
    n1, mp, n0 = nz_shape(m, n, x.dtype)
    padded = torch.zeros((mp, n1 * n0), dtype=x.dtype)
    padded[:m, :n] = x
    # (m1*m0, n1, n0) -> (n1, m1*m0, n0): each column strip of n0 becomes one contiguous run of fractals.
    return padded.reshape(mp, n1, n0).permute(1, 0, 2).contiguous()


def unpack_nz(nz: torch.Tensor, m: int, n: int) -> torch.Tensor:
    """NZ (n1, m1*m0, n0) -> ND (m, n), dropping the padding (ATB's outCrops)."""
    if nz.dim() != 3:
        raise QuantizeError(f"unpack_nz takes (n1, m1*m0, n0), got shape {tuple(nz.shape)}")
    want = nz_shape(m, n, nz.dtype)
    if tuple(nz.shape) != want:
        raise QuantizeError(f"NZ shape {tuple(nz.shape)} does not hold an ND ({m}, {n}) {nz.dtype}; expected {want}")
    n1, mp, n0 = nz.shape
    return nz.permute(1, 0, 2).reshape(mp, n1 * n0)[:m, :n].contiguous()

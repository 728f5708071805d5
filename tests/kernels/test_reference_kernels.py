"""Reference kernels against independent integer/float arithmetic, and the parity harness report."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kernels import dispatch, nz, smooth, w8a8
from kernels.parity import cli_report, run
from kernels.quantize_errors import QuantizeError


def test_int8_matmul_equals_int64_numpy() -> None:
    g = torch.Generator().manual_seed(1)
    x = torch.randint(-128, 128, (9, 771), generator=g, dtype=torch.int8)
    w = torch.randint(-128, 128, (37, 771), generator=g, dtype=torch.int8)
    want = x.numpy().astype(np.int64) @ w.numpy().astype(np.int64).T
    got = w8a8.int8_matmul(x, w)
    assert got.dtype == torch.int32
    np.testing.assert_array_equal(got.numpy().astype(np.int64), want)
    # The extreme corner: every product is (-128) * (-128).
    lo = torch.full((2, 4096), -128, dtype=torch.int8)
    assert int(w8a8.int8_matmul(lo, lo)[0, 0]) == 4096 * 128 * 128


def test_quant_matmul_is_integer_accumulate_then_scale() -> None:
    g = torch.Generator().manual_seed(2)
    x = torch.randint(-128, 128, (5, 64), generator=g, dtype=torch.int8)
    w = torch.randint(-127, 128, (24, 64), generator=g, dtype=torch.int8)
    bias = torch.randint(-5000, 5000, (24,), generator=g, dtype=torch.int32)
    scale = torch.rand(24, generator=g) * 1e-3 + 1e-5
    deq = w8a8.encode_deq_scale(scale)
    acc = x.numpy().astype(np.int64) @ w.numpy().astype(np.int64).T + bias.numpy().astype(np.int64)
    want = (acc.astype(np.float64) * scale.numpy().astype(np.float64)).astype(np.float16)
    got = w8a8.quant_matmul(x, w, deq, bias, hardware_scale=False)
    assert got.dtype == torch.float16
    np.testing.assert_allclose(got.numpy().astype(np.float64), want.astype(np.float64), rtol=2**-10, atol=1e-7)


def test_deq_scale_bit_pattern() -> None:
    # 1.0f is 0x3F800000: the checkpoint stores exactly that in the low 32 bits of an int64.
    assert int(w8a8.encode_deq_scale(torch.tensor([1.0]))[0]) == 0x3F800000
    s = torch.tensor([3.0e-4, 1.7, 2.0**-20])
    assert torch.equal(w8a8.decode_deq_scale(w8a8.encode_deq_scale(s)), s)
    hw = w8a8.decode_deq_scale(w8a8.encode_deq_scale(s), hardware=True)
    assert torch.all(hw <= s) and torch.all((s - hw) / s < 2.0**-10)
    tq = w8a8.trans_quant_param(s)
    assert torch.all(tq & (1 << 46) != 0)
    with pytest.raises(QuantizeError, match="int64"):
        w8a8.decode_deq_scale(s)


def test_static_linear_matches_float_and_folds_offset_and_bias() -> None:
    g = torch.Generator().manual_seed(3)
    x = torch.randn(32, 96, generator=g) + 0.7  # skewed: a non-zero offset is needed
    w = torch.randn(40, 96, generator=g) * 0.05
    b = torch.randn(40, generator=g)
    act = w8a8.act_quant_params(float(x.min()), float(x.max()))
    assert int(act.offset) != 0
    layer = w8a8.make_w8a8_linear(w, b, act)
    assert layer.weight.dtype == torch.int8 and layer.deq_scale.dtype == torch.int64
    assert layer.quant_bias.dtype == torch.int32 and layer.input_offset.dtype == torch.int8
    y = w8a8.w8a8_linear(x, layer).to(torch.float32)
    ref = x @ w.t() + b
    assert float((y - ref).norm() / ref.norm()) < 0.02


def test_weight_quantization_zero_rows_and_bad_input() -> None:
    w = torch.zeros(3, 8)
    w[1] = torch.linspace(-2, 2, 8)
    q, s = w8a8.quantize_weight_per_channel(w)
    assert torch.equal(q[0], torch.zeros(8, dtype=torch.int8)) and float(s[0]) == 1.0
    assert int(q[1].abs().max()) == 127
    with pytest.raises(QuantizeError, match="NaN"):
        w8a8.quantize_weight_per_channel(torch.tensor([[float("nan"), 1.0]]))
    with pytest.raises(QuantizeError, match="2-D"):
        w8a8.quantize_weight_per_channel(torch.zeros(2, 2, 2))


@pytest.mark.parametrize(
    ("m", "n", "dtype"), [(100, 30, torch.float16), (1, 1, torch.int8), (33, 65, torch.int8), (128, 256, torch.int8)]
)
def test_nz_round_trip_and_layout(m: int, n: int, dtype: torch.dtype) -> None:
    x = torch.randint(-128, 128, (m, n)).to(dtype)
    packed = nz.pack_nz(x)
    n0 = 16 if dtype == torch.float16 else 32
    assert tuple(packed.shape) == (-(-n // n0), -(-m // 16) * 16, n0)
    assert torch.equal(nz.unpack_nz(packed, m, n), x)
    # Element (i, j) sits in fractal column j // n0, row i, lane j % n0; the padding is zero.
    assert packed[(n - 1) // n0, m - 1, (n - 1) % n0] == x[m - 1, n - 1]
    assert int(packed.to(torch.int64).abs().sum()) == int(x.to(torch.int64).abs().sum())


def test_nz_shape_from_cann_docs() -> None:
    # ATB TransdataOperation docs: fp16 ND {8, 100, 30} -> NZ {8, 2, 112, 16}.
    assert nz.nz_shape(100, 30, torch.float16) == (2, 112, 16)
    with pytest.raises(QuantizeError, match="expected"):
        nz.unpack_nz(torch.zeros(2, 112, 16, dtype=torch.float16), 100, 40)


def test_smoothing_preserves_the_product_and_flattens_activations() -> None:
    g = torch.Generator().manual_seed(4)
    x = torch.randn(16, 32, generator=g)
    x[:, 3] *= 50  # an outlier channel
    w = torch.randn(8, 32, generator=g)
    s = smooth.smooth_scales(x.abs().amax(0), smooth.weight_absmax(w), 0.5)
    xs = x / s
    torch.testing.assert_close(xs @ smooth.scale_weight_inputs(w, s).t(), x @ w.t(), rtol=1e-4, atol=1e-3)
    ratio = lambda t: float(t.abs().amax(0).max() / t.abs().amax(0).median())  # noqa: E731
    assert ratio(xs) < ratio(x)
    with pytest.raises(QuantizeError, match="alpha"):
        smooth.smooth_scales(torch.ones(2), torch.ones(2), 1.5)


def test_dispatch_falls_back_to_reference_without_npu() -> None:
    if dispatch.has_npu():
        pytest.skip("an NPU is present: dispatch picks the device side")
    assert dispatch.get("quant_matmul") is w8a8.quant_matmul
    with pytest.raises(KeyError, match="unknown kernel"):
        dispatch.get("nope")


def test_parity_report_passes_and_says_what_it_checked() -> None:
    ok, text = cli_report()
    assert ok, text
    if not dispatch.has_npu():
        assert text.startswith("No NPU")
    for kernel in ("quantize_activation", "int8_matmul", "quant_matmul", "pack_nz", "smooth", "trans_quant_param"):
        assert kernel in text
    assert "zeros" in text and "saturating" in text and "1x17x33" in text


def test_parity_detects_a_wrong_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    # A kernel that is off by one integer step must fail the harness, not slip through.
    real = w8a8.int8_matmul
    monkeypatch.setattr(w8a8, "int8_matmul", lambda a, b: real(a, b) + 1)
    ok, results = run(device=False)
    assert not ok
    assert any(r.kernel == "int8_matmul" and not r.ok for r in results)

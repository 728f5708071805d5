"""Parity harness: every kernel's device implementation against its reference, on awkward inputs.

With an NPU, each device kernel runs beside its reference on random, all-zero, saturating and
odd-shaped inputs, and the report gives the max abs/rel error against the stated tolerance. Without
one, it says so and checks the reference kernels against plain float64 / int64 math instead, so a
wrong reference cannot hide behind a matching device kernel later.

``cli_report()`` is what ``vlbatch doctor --kernels`` prints.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from kernels import dispatch, nz, smooth, w8a8

Pair = tuple[torch.Tensor, torch.Tensor]  # (got, want)
# Shapes chosen to hit padding and tails: 1 row, K not a multiple of 16/32, N not a multiple of 16/32.
SHAPES = [(1, 17, 33), (7, 64, 48), (16, 128, 128), (3, 1000, 5)]
# One fp16 rounding of the output: half an ulp is 2**-11 relative.
FP16_RTOL = 2.0**-11
# The fixpipe keeps 10 mantissa bits of deq_scale: up to 2**-10 relative below the float32 value.
HW_SCALE_RTOL = 2.0**-10


@dataclass(frozen=True)
class Result:
    kernel: str
    case: str
    max_abs: float
    max_rel: float
    atol: float
    rtol: float
    ok: bool
    note: str = ""


def compare(kernel: str, case: str, got: torch.Tensor, want: torch.Tensor, *, atol: float, rtol: float) -> Result:
    """allclose-style check (|got - want| <= atol + rtol * |want|) that also reports the worst errors."""
    if got.shape != want.shape:
        return Result(
            kernel,
            case,
            float("inf"),
            float("inf"),
            atol,
            rtol,
            False,
            f"shape {tuple(got.shape)} != {tuple(want.shape)}",
        )
    g, w = got.to(torch.float64), want.to(torch.float64)
    diff = (g - w).abs()
    if diff.numel() == 0:
        return Result(kernel, case, 0.0, 0.0, atol, rtol, True)
    nonzero = w.abs() > 0
    max_rel = float((diff[nonzero] / w.abs()[nonzero]).max()) if nonzero.any() else 0.0
    ok = bool((diff <= atol + rtol * w.abs()).all()) and bool(torch.isfinite(g).all() == torch.isfinite(w).all())
    return Result(kernel, case, float(diff.max()), max_rel, atol, rtol, ok)


def _inputs(seed: int) -> Iterator[tuple[str, torch.Tensor, torch.Tensor]]:
    """(case name, float activations (M, K), float weight (N, K)) covering the awkward corners."""
    gen = torch.Generator().manual_seed(seed)
    for m, k, n in SHAPES:
        yield f"random {m}x{k}x{n}", torch.randn(m, k, generator=gen), torch.randn(n, k, generator=gen) * 0.05
    yield "zeros", torch.zeros(4, 32), torch.zeros(16, 32)
    x = torch.randn(8, 64, generator=gen)
    x[0, 0], x[1, 1] = 1e4, -1e4  # one outlier per sign: most of the range goes unused
    yield "outliers", x, torch.randn(32, 64, generator=gen)
    # Activations far past the calibrated range clip to -128/127; small weights keep the output in fp16 range.
    yield "saturating", torch.full((5, 40), 60000.0), torch.full((33, 40), -1e-3)


def _static_layer(x: torch.Tensor, weight: torch.Tensor) -> w8a8.W8A8Linear:
    act = w8a8.act_quant_params(float(x.min()), float(x.max()))
    return w8a8.make_w8a8_linear(weight, torch.linspace(-1, 1, weight.shape[0]), act)


def _reference_cases(seed: int) -> Iterator[Result]:
    """Reference kernels against float64 / int64 arithmetic written independently of them."""
    for case, x, weight in _inputs(seed):
        layer = _static_layer(x, weight)
        scale64 = layer.input_scale.to(torch.float64)
        recip = (1.0 / layer.input_scale).to(torch.float64)
        want_q = (x.to(torch.float64) * recip + float(layer.input_offset)).round().clamp(-128, 127)
        x_q = w8a8.quantize_activation(x, layer.input_scale, layer.input_offset)
        yield compare("quantize_activation", case, x_q, want_q, atol=0, rtol=0)
        # Dequantized activations sit within half a step of the input, unless clipped, plus what the fp16
        # reciprocal costs: |x| * 2**-11 / scale <= 256 * 2**-11 = 1/8 step.
        off = float(layer.input_offset)
        inside = (x >= scale64 * (-128 - off)) & (x <= scale64 * (127 - off))
        deq = scale64 * (x_q.to(torch.float64) - float(layer.input_offset))
        yield compare(
            "quantize_activation",
            case + " (dequantized)",
            deq[inside],
            x.to(torch.float64)[inside],
            atol=float(scale64) * 0.625 + 1e-9,
            rtol=0,
        )
        acc64 = x_q.to(torch.int64) @ layer.weight.to(torch.int64).t()
        yield compare("int8_matmul", case, w8a8.int8_matmul(x_q, layer.weight), acc64, atol=0, rtol=0)
        deq_scale = w8a8.decode_deq_scale(layer.deq_scale).to(torch.float64)
        want_y = (acc64 + layer.quant_bias.to(torch.int64)).to(torch.float64) * deq_scale
        got_y = w8a8.quant_matmul(x_q, layer.weight, layer.deq_scale, layer.quant_bias, hardware_scale=False)
        yield compare("quant_matmul", case, got_y, want_y.clamp(-65504, 65504), atol=1e-7, rtol=FP16_RTOL)
        hw_y = w8a8.quant_matmul(x_q, layer.weight, layer.deq_scale, layer.quant_bias, hardware_scale=True)
        yield compare(
            "quant_matmul",
            case + " (hw scale)",
            hw_y,
            want_y.clamp(-65504, 65504),
            atol=1e-7,
            rtol=FP16_RTOL + HW_SCALE_RTOL,
        )
        w_q, w_scale = w8a8.quantize_weight_per_channel(weight)
        yield compare(
            "quantize_weight_per_channel",
            case,
            w_q.to(torch.float64) * w_scale.to(torch.float64),
            weight.to(torch.float64),
            atol=float(w_scale.max()) / 2 + 1e-9,
            rtol=0,
        )
    lo = torch.full((3, 1000), -128, dtype=torch.int8)
    hi = torch.full((5, 1000), -127, dtype=torch.int8)  # the largest |acc| a 1000-deep reduction can reach
    yield compare(
        "int8_matmul",
        "int8 extremes K=1000",
        w8a8.int8_matmul(lo, hi),
        lo.to(torch.int64) @ hi.to(torch.int64).t(),
        atol=0,
        rtol=0,
    )
    for case, scale in [
        ("unit", torch.tensor([1.0])),
        ("tiny", torch.tensor([1e-30, 3e-8])),
        ("wide", torch.logspace(-20, 20, 41)),
    ]:
        bits = w8a8.encode_deq_scale(scale)
        yield compare("deq_scale encode/decode", case, w8a8.decode_deq_scale(bits), scale, atol=0, rtol=0)
        tq = w8a8.trans_quant_param(scale)
        yield compare(
            "trans_quant_param", case, w8a8.decode_deq_scale(tq, hardware=True), scale, atol=0, rtol=HW_SCALE_RTOL
        )
    gen = torch.Generator().manual_seed(seed + 1)
    for m, n, dtype in [(100, 30, torch.float16), (1, 1, torch.int8), (33, 65, torch.int8), (16, 32, torch.int8)]:
        x = torch.randint(-128, 128, (m, n), generator=gen).to(dtype)
        packed = nz.pack_nz(x)
        rows, cols = torch.meshgrid(torch.arange(m), torch.arange(n), indexing="ij")
        n0 = nz.n0_for(dtype)
        placed = packed[cols // n0, rows, cols % n0]  # where the NZ definition says element (i, j) lives
        yield compare("pack_nz", f"{m}x{n} {dtype}", placed, x, atol=0, rtol=0)
        yield compare("unpack_nz", f"{m}x{n} {dtype}", nz.unpack_nz(packed, m, n), x, atol=0, rtol=0)
    x = torch.randn(6, 48, generator=gen) * torch.logspace(-2, 2, 48)
    weight = torch.randn(24, 48, generator=gen)
    s = smooth.smooth_scales(x.abs().amax(dim=0), smooth.weight_absmax(weight), 0.5)
    got = (x / s) @ smooth.scale_weight_inputs(weight, s).t()
    yield compare(
        "smooth", "x/s @ (W*s)^T", got, x.to(torch.float64) @ weight.to(torch.float64).t(), atol=1e-4, rtol=1e-5
    )


def _device_cases(seed: int) -> Iterator[Result]:
    """Device implementations against the references, same inputs."""
    for case, x, weight in _inputs(seed):
        layer = _static_layer(x.to(torch.float16), weight)
        xh = x.clamp(-65504, 65504).to(torch.float16)
        want_q = w8a8.quantize_activation(xh, layer.input_scale, layer.input_offset)
        got_q = dispatch.get("quantize_activation", device=True)(xh, layer.input_scale, layer.input_offset)
        # A product that lands on .5 can round the other way when the device multiplies in fp16.
        yield compare("quantize_activation", case, got_q, want_q, atol=1, rtol=0)
        want_y = w8a8.quant_matmul(want_q, layer.weight, layer.deq_scale, layer.quant_bias, hardware_scale=True)
        got_y = dispatch.get("quant_matmul", device=True)(want_q, layer.weight, layer.deq_scale, layer.quant_bias)
        yield compare("quant_matmul", case, got_y, want_y, atol=1e-6, rtol=2 * FP16_RTOL)
    scale = torch.logspace(-20, 20, 41)
    yield compare(
        "trans_quant_param",
        "wide",
        dispatch.get("trans_quant_param", device=True)(scale),
        w8a8.trans_quant_param(scale),
        atol=0,
        rtol=0,
    )
    for m, n, dtype in [(100, 30, torch.float16), (33, 65, torch.int8)]:
        x = torch.randint(-128, 128, (m, n)).to(dtype)
        yield compare(
            "nz_roundtrip", f"{m}x{n} {dtype}", dispatch.get("nz_roundtrip", device=True)(x), x, atol=0, rtol=0
        )


def run(seed: int = 0, *, device: bool | None = None) -> tuple[bool, list[Result]]:
    """All checks; ``device=None`` runs the device ones when an NPU is present."""
    use_device = dispatch.has_npu() if device is None else device
    cases: Callable[[int], Iterator[Result]] = _device_cases if use_device else _reference_cases
    results = list(cases(seed))
    return all(r.ok for r in results), results


def format_results(results: list[Result]) -> str:
    head = f"{'kernel':<28} {'case':<34} {'max_abs':>10} {'max_rel':>10} {'atol':>8} {'rtol':>9}  ok"
    rows = [
        f"{r.kernel:<28} {r.case:<34} {r.max_abs:>10.3g} {r.max_rel:>10.3g} {r.atol:>8.2g} {r.rtol:>9.2g}  "
        f"{'yes' if r.ok else 'NO'}{'  ' + r.note if r.note else ''}"
        for r in results
    ]
    return "\n".join([head, *rows])


def cli_report() -> tuple[bool, str]:
    """(all passed, printable report) for ``vlbatch doctor --kernels``."""
    use_device = dispatch.has_npu()
    ok, results = run(device=use_device)
    if use_device:
        intro = "NPU found: device kernels (torch_npu) checked against the reference kernels."
    else:
        intro = (
            "No NPU (torch_npu missing or no device): device kernels not run; "
            "reference kernels checked against float64/int64 math."
        )
    failed = sum(not r.ok for r in results)
    summary = f"{len(results) - failed}/{len(results)} checks passed"
    return ok, "\n".join([intro, format_results(results), summary])

"""Sweep one knob (chunk size, max_num_seqs, visual-token budget, images per prompt) with the rest fixed.

Every value runs the chosen arms over the same inputs; the knee is the smallest value whose
throughput reaches 95% of the best one. With ``images_per_prompt`` an item holds several photos, so
that sweep compares photos/s rather than items/s.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from benchmarks.harness.inputs import BenchInputs, prepare_inputs
from benchmarks.harness.result import ArmFn, ArmResult
from benchmarks.harness.spec import BenchSpec
from vlbatch.errors import INVALID_SWEEP, VlbatchError

SWEEPABLE = ("chunk_size", "max_num_seqs", "max_visual_tokens", "images_per_prompt")
KNEE_FRACTION = 0.95


class SweepError(VlbatchError):
    """A ``--sweep`` that is not ``PARAM=V1,V2,...`` with a sweepable parameter and integer values."""

    code = INVALID_SWEEP


def parse_sweep(text: str) -> tuple[str, list[int]]:
    """``PARAM=V1,V2,...`` -> (param, values), values as given (duplicates dropped)."""
    param, sep, raw = text.partition("=")
    param = param.strip().replace("-", "_")
    if not sep or param not in SWEEPABLE:
        raise SweepError(f"--sweep takes PARAM=V1,V2,... with PARAM one of {', '.join(SWEEPABLE)}; got {text!r}")
    try:
        values = [int(v) for v in raw.split(",") if v.strip()]
    except ValueError as exc:
        raise SweepError(f"--sweep values must be integers: {raw!r}") from exc
    if not values:
        raise SweepError(f"--sweep {param}= lists no value")
    return param, list(dict.fromkeys(values))


def knee(points: Sequence[tuple[float, float]], fraction: float = KNEE_FRACTION) -> float | None:
    """The smallest x whose y reaches ``fraction`` of the best y (None without a positive y)."""
    best = max((y for _, y in points), default=0.0)
    if best <= 0:
        return None
    return min(x for x, y in points if y >= fraction * best)


@dataclass(frozen=True)
class SweepPoint:
    value: int
    result: ArmResult


def _rate(param: str, r: ArmResult) -> float:
    return r.images_per_s if param == "images_per_prompt" else r.items_per_s


def run_sweep(
    spec: BenchSpec,
    param: str,
    values: Sequence[int],
    arms: Mapping[str, ArmFn],
    *,
    run: Callable[..., list[ArmResult]] | None = None,
    inputs: BenchInputs | None = None,
    out: TextIO | None = None,
    on_result: Callable[[ArmResult], None] | None = None,
) -> dict[str, list[SweepPoint]]:
    """Run ``arms`` for each value of ``param``; prints the per-value figures and the knee per arm.
    ``on_result`` is called with each arm's result (a progress bar)."""
    if param not in SWEEPABLE:
        raise SweepError(f"cannot sweep {param!r}; one of {', '.join(SWEEPABLE)}")
    if run is None:
        from benchmarks.harness.run import run_bench

        run = run_bench
    stream = out or sys.stdout
    if inputs is None:  # written once: no knob changes the photos or the model
        # enough warm-up photos for the largest burst swept
        base = spec.with_changes(images_per_prompt=max(values)) if param == "images_per_prompt" else spec
        inputs = prepare_inputs(base)
    points: dict[str, list[SweepPoint]] = {name: [] for name in arms}
    for value in values:
        variant = spec.with_changes(**{param: value})
        for res in run(variant, arms, inputs=inputs):
            points.setdefault(res.name, []).append(SweepPoint(value, res))
            print(f"sweep {param}={value} {res.name}: {_describe(param, res)}", file=stream, flush=True)
            if on_result is not None:
                on_result(res)
    print(format_sweep(param, points), file=stream, flush=True)
    return points


def _describe(param: str, r: ArmResult) -> str:
    if r.error is not None:
        return f"FAILED: {r.error}"
    unit = "photos/s" if param == "images_per_prompt" else "items/s"
    return f"{_rate(param, r):.2f} {unit}, {r.output_tokens_per_s:.1f} out tok/s"


def format_sweep(param: str, points: Mapping[str, Sequence[SweepPoint]]) -> str:
    unit = "photos/s" if param == "images_per_prompt" else "items/s"
    lines = []
    for name, pts in points.items():
        ok = [(float(p.value), _rate(param, p.result)) for p in pts if p.result.error is None]
        row = ", ".join(f"{p.value}: {_describe(param, p.result).split(',')[0]}" for p in pts)
        k = knee(ok)
        knee_txt = "no knee" if k is None else f"knee at {param}={int(k)} (>= {KNEE_FRACTION:.0%} of the best {unit})"
        lines.append(f"{name}: {row}; {knee_txt}")
    return "\n".join(lines)


def _knee_value(param: str, pts: Sequence[SweepPoint]) -> int | None:
    k = knee([(float(p.value), _rate(param, p.result)) for p in pts if p.result.error is None])
    return None if k is None else int(k)


def sweep_json(param: str, points: Mapping[str, Sequence[SweepPoint]], spec: BenchSpec | None = None) -> dict[str, Any]:
    """``sweep.param``, ``sweep.knee.<arm>`` and ``sweep.points.<arm>`` (each point: value and the arm's figures)."""
    doc: dict[str, Any] = {
        "sweep": {
            "param": param,
            "knee": {name: _knee_value(param, pts) for name, pts in points.items()},
            "points": {name: [{"value": p.value, **p.result.to_dict()} for p in pts] for name, pts in points.items()},
        }
    }
    if spec is not None:
        doc["spec"] = spec.model_dump(mode="json")
    return doc

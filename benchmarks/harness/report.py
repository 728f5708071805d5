"""The benchmark's table, its ratios to raw ``LLM.generate``, the JSON file and the plot."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from benchmarks.harness.result import ArmResult
from benchmarks.harness.spec import BenchSpec

# Always present in the JSON (null when that arm did not run), so a dashboard can rely on them.
REQUIRED_RATIOS = ("service_over_raw", "embedded_over_raw")
REQUIRED_OCCUPANCY = ("service", "embedded")


def _by_name(results: Sequence[ArmResult]) -> dict[str, ArmResult]:
    return {r.name: r for r in results}


def ratios(results: Sequence[ArmResult]) -> dict[str, float | None]:
    """``<arm>_over_raw``: each arm's items/s divided by raw's (None without a usable raw or arm)."""
    arms = _by_name(results)
    raw = arms.get("raw")
    base = raw.items_per_s if raw is not None and raw.error is None else 0.0
    out: dict[str, float | None] = {k: None for k in REQUIRED_RATIOS}
    for name, r in arms.items():
        if name == "raw":
            continue
        out[f"{name}_over_raw"] = r.items_per_s / base if base > 0 and r.error is None and r.seconds > 0 else None
    return out


def _fmt(v: float | None, spec: str = ".1f") -> str:
    return "-" if v is None else format(v, spec)


def format_table(results: Sequence[ArmResult]) -> str:
    header = (
        f"{'arm':<11} {'items':>6} {'failed':>6} {'seconds':>8} {'items/s':>8} {'out tok/s':>10} "
        f"{'occupancy':>12} {'steady occ':>12} {'prep ms/img':>11} {'DB ms/item':>10} {'DB CPU ms/item':>14} "
        f"{'claim ms/item':>13}"
    )
    lines = [header, "-" * len(header)]
    for r in results:
        if r.error is not None:
            lines.append(f"{r.name:<11} FAILED: {r.error}")
            continue
        occ = "-" if r.mean_occupancy is None else f"{r.mean_occupancy:.1f}/{r.max_num_seqs}"
        steady = "-" if r.steady_occupancy is None else f"{r.steady_occupancy:.1f}/{r.max_num_seqs}"
        lines.append(
            f"{r.name:<11} {r.items:>6} {r.failed:>6} {r.seconds:>8.2f} {r.items_per_s:>8.2f} "
            f"{r.output_tokens_per_s:>10.1f} {occ:>12} {steady:>12} {_fmt(r.prep_ms_per_image):>11} "
            f"{_fmt(r.db_ms_per_item, '.2f'):>10} {_fmt(r.db_cpu_ms_per_item, '.2f'):>14} "
            f"{_fmt(r.claim_ms_per_item, '.2f'):>13}"
        )
    rat = {k: v for k, v in ratios(results).items() if v is not None}
    if rat:
        lines.append("")
        lines.append("items/s ratios: " + ", ".join(f"{k} = {v:.2f}" for k, v in rat.items()))
    notes = [f"  {r.name}: {r.notes}" for r in results if r.notes]
    if notes:
        lines += ["", "notes:", *notes]
    return "\n".join(lines)


def print_report(results: Sequence[ArmResult], file: TextIO | None = None) -> None:
    print(format_table(results), file=file or sys.stdout, flush=True)


def to_json(results: Sequence[ArmResult], spec: BenchSpec | None = None) -> dict[str, Any]:
    """``arms.<name>.*`` (every ArmResult field plus items_per_s, output_tokens_per_s), ``ratios.*``,
    ``occupancy.<name>`` and ``occupancy_steady.<name>`` (10-90% of the items done; ``service`` and
    ``embedded`` always present)."""
    occupancy: dict[str, float | None] = {k: None for k in REQUIRED_OCCUPANCY}
    occupancy.update({r.name: r.mean_occupancy for r in results})
    steady: dict[str, float | None] = {k: None for k in REQUIRED_OCCUPANCY}
    steady.update({r.name: r.steady_occupancy for r in results})
    doc: dict[str, Any] = {
        "arms": {r.name: r.to_dict() for r in results},
        "ratios": ratios(results),
        "occupancy": occupancy,
        "occupancy_steady": steady,
    }
    if spec is not None:
        doc["spec"] = spec.model_dump(mode="json")
    return doc


def write_json(
    path: Path, results: Sequence[ArmResult], spec: BenchSpec | None = None, *, extra: dict[str, Any] | None = None
) -> Path:
    """The figures of ``to_json``, plus ``extra`` keys (e.g. every round's figures) at the top level."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**to_json(results, spec), **(extra or {})}, indent=2))
    return path


def throughput_curve(result: ArmResult, window_s: float | None = None) -> list[tuple[float, float]]:
    """(t, items/s over the trailing window) from a timeline; the window defaults to 1/20 of the run (>= 1 s)."""
    pts = [(t, n) for t, n, _ in result.timeline]
    if len(pts) < 2:
        return []
    span = pts[-1][0] - pts[0][0]
    window = window_s if window_s is not None else max(1.0, span / 20)
    out: list[tuple[float, float]] = []
    j = 0
    for t, n in pts[1:]:
        while j + 1 < len(pts) and pts[j + 1][0] <= t - window:
            j += 1
        t0, n0 = pts[j]
        if t > t0:
            out.append((t, (n - n0) / (t - t0)))
    return out


def write_plot(path: Path, results: Sequence[ArmResult]) -> Path:
    """A PNG: items/s over time (top) and running requests over time (bottom), one line per arm."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise RuntimeError(
            "writing the plot needs matplotlib (in the dev extra: `uv sync --extra dev` or `pip install matplotlib`)"
        ) from exc
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    colors = plt.rcParams["axes.prop_cycle"].by_key().get("color", ["C0"])
    for i, r in enumerate(results):
        if r.error is not None:
            continue
        color = colors[i % len(colors)]  # one colour per arm in both panels
        curve = throughput_curve(r)
        if curve:
            top.plot(
                [t for t, _ in curve], [v for _, v in curve], color=color, label=f"{r.name} ({r.items_per_s:.2f}/s)"
            )
        occ = [(t, run) for t, _, run in r.timeline if run is not None]
        if occ:
            bottom.step([t for t, _ in occ], [v for _, v in occ], where="post", color=color, label=r.name)
    top.set_ylabel("items/s (trailing window)")
    top.set_title("Throughput over time")
    top.legend(loc="best", fontsize="small")
    bottom.set_ylabel("running requests")
    bottom.set_xlabel("seconds since the timed start")
    bottom.set_title("Engine occupancy over time")
    if bottom.get_legend_handles_labels()[0]:
        bottom.legend(loc="best", fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path

"""Rounds of the same arms: the median round per arm, every round in the JSON, and the run order."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.harness.report import write_json
from benchmarks.harness.result import ArmResult
from benchmarks.harness.rounds import by_round, format_rounds, median_results, rounds_json
from benchmarks.harness.run import run_bench
from benchmarks.harness.spec import BenchSpec


def arm(
    name: str, seconds: float, *, error: str | None = None, db: tuple[float, float, float, float] | None = None
) -> ArmResult:
    """``db``: the writes' wall and CPU, then the claims' wall and CPU, ms per item."""
    if error is not None:
        return ArmResult.failure(name, error, max_num_seqs=64)
    return ArmResult(
        name=name,
        items=100,
        failed=0,
        seconds=seconds,
        output_tokens=0,
        prompt_tokens=0,
        mean_occupancy=None,
        max_num_seqs=64,
        prep_ms_per_image=None,
        db_ms_per_item=db[0] if db else None,
        db_cpu_ms_per_item=db[1] if db else None,
        claim_ms_per_item=db[2] if db else None,
        claim_cpu_ms_per_item=db[3] if db else None,
    )


# Three rounds of raw and service: raw 10, 12.5, 8 items/s; service 9, 5 (an outlier), 10 items/s.
ROUNDS = [
    arm("raw", 10.0),
    arm("service", 100 / 9, db=(2.5, 0.3, 1.5, 0.1)),
    arm("raw", 12.5),
    arm("service", 20.0, db=(4.25, 0.5, 3.0, 0.2)),
    arm("raw", 8.0),
    arm("service", 10.0, db=(1.0, 0.25, 0.5, 0.05)),
]


def test_median_round_per_arm_and_ratio_from_medians() -> None:
    med = median_results(ROUNDS)
    assert [r.name for r in med] == ["raw", "service"]
    assert med[0].items_per_s == pytest.approx(10.0)
    assert med[1].items_per_s == pytest.approx(9.0)  # the 5 items/s round does not drag it down
    assert by_round(ROUNDS, 3)[1] == ROUNDS[2:4]
    with pytest.raises(ValueError, match="do not split into 4 rounds"):
        by_round(ROUNDS, 4)


def test_a_failed_first_round_keeps_its_place_in_the_db_figures() -> None:
    results = [arm("service", 1.0, error="boom"), arm("service", 10.0, db=(2.0, 0.2, 1.0, 0.1))]
    assert rounds_json(results, 2)["db_ms_by_round"] == {
        "service": [None, {"wall": 2.0, "cpu": 0.2, "claim_wall": 1.0, "claim_cpu": 0.1}]
    }
    assert "service     DB ms/item, wall / CPU (claims' wall): failed, 2.00 / 0.20 (1.00)" in format_rounds(results, 2)


def test_failed_rounds_are_left_out_unless_all_failed() -> None:
    results = [arm("raw", 10.0), arm("raw", 1.0, error="boom"), arm("raw", 5.0)]  # 10 and 20 items/s
    assert median_results(results)[0].items_per_s == pytest.approx(10.0)  # lower middle of the two good ones
    assert median_results([arm("raw", 1.0, error="boom")])[0].error == "boom"


def test_rounds_in_json_and_text(tmp_path: Path) -> None:
    doc = json.loads(write_json(tmp_path / "b.json", median_results(ROUNDS), extra=rounds_json(ROUNDS, 3)).read_text())
    assert doc["ratios"]["service_over_raw"] == pytest.approx(0.9)
    assert doc["rounds"]["service"] == pytest.approx([9.0, 5.0, 10.0])
    assert [r["service_over_raw"] for r in doc["ratios_by_round"]] == pytest.approx([0.9, 0.625, 0.8])
    assert doc["rounds"]["raw"] == pytest.approx([10.0, 8.0, 12.5])
    # every round's DB cost, not only the median round's: a target on it holds in each
    assert doc["db_ms_by_round"] == {
        "service": [
            {"wall": 2.5, "cpu": 0.3, "claim_wall": 1.5, "claim_cpu": 0.1},
            {"wall": 4.25, "cpu": 0.5, "claim_wall": 3.0, "claim_cpu": 0.2},
            {"wall": 1.0, "cpu": 0.25, "claim_wall": 0.5, "claim_cpu": 0.05},
        ]
    }
    text = format_rounds(ROUNDS, 3)
    assert "service     9.00, 5.00, 10.00" in text and "round 2 ratios: service_over_raw = 0.62" in text
    assert (
        "service     DB ms/item, wall / CPU (claims' wall): 2.50 / 0.30 (1.50), 4.25 / 0.50 (3.00), 1.00 / 0.25 (0.50)"
        in text
    )
    assert "raw         DB" not in text  # raw writes no results


def test_run_bench_interleaves_the_arms_round_after_round(tmp_path: Path) -> None:
    order: list[str] = []

    def make(name: str):  # type: ignore[no-untyped-def]
        def fn(spec: BenchSpec, model_dir: Path, photos: list[Path]) -> ArmResult:
            order.append(name)
            return arm(name, 1.0)

        return fn

    from benchmarks.harness.inputs import BenchInputs

    inputs = BenchInputs(model_dir=tmp_path, photos=[tmp_path / "a.jpg"], warmup=[])
    results = run_bench(BenchSpec(), {"raw": make("raw"), "service": make("service")}, inputs=inputs, rounds=3)
    assert order == ["raw", "service"] * 3
    assert [r.name for r in results] == order

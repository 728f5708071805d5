"""The benchmark's arithmetic and files, from hand-made results (no engine, no server)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.harness.arms import ARMS, UnknownArm, parse_arms, select_arms
from benchmarks.harness.inputs import group_items, split_warmup
from benchmarks.harness.report import format_table, ratios, throughput_curve, to_json, write_json, write_plot
from benchmarks.harness.result import ArmResult, mean_running
from benchmarks.harness.run import reference, run_bench
from benchmarks.harness.serve import cli_flags, metric_value
from benchmarks.harness.spec import BenchSpec
from benchmarks.harness.sweep import SweepError, SweepPoint, format_sweep, knee, parse_sweep, run_sweep


def arm(name: str, items: int, seconds: float, *, occupancy: float | None = None, tokens: int = 0) -> ArmResult:
    return ArmResult(
        name=name,
        items=items,
        failed=0,
        seconds=seconds,
        output_tokens=tokens,
        prompt_tokens=10 * items,
        mean_occupancy=occupancy,
        max_num_seqs=64,
        prep_ms_per_image=3.0,
        db_ms_per_item=None if name == "raw" else 0.5,
        timeline=[(0.0, 0, occupancy), (seconds / 2, items // 2, occupancy), (seconds, items, occupancy)],
    )


RESULTS = [
    arm("raw", 100, 10.0, tokens=5000),
    arm("embedded", 100, 12.5, occupancy=60.0),
    arm("service", 100, 20.0, occupancy=48.0),
    arm("serve_c32", 100, 25.0, occupancy=30.5),
]


def test_rates_and_ratios() -> None:
    raw = RESULTS[0]
    assert raw.items_per_s == pytest.approx(10.0)
    assert raw.output_tokens_per_s == pytest.approx(500.0)
    r = ratios(RESULTS)
    assert r["embedded_over_raw"] == pytest.approx(0.8)
    assert r["service_over_raw"] == pytest.approx(0.5)
    assert r["serve_c32_over_raw"] == pytest.approx(0.4)
    assert "raw_over_raw" not in r


def test_ratios_without_raw_or_with_a_failed_arm() -> None:
    assert ratios(RESULTS[1:]) == {"service_over_raw": None, "embedded_over_raw": None, "serve_c32_over_raw": None}
    failed = ArmResult.failure("service", "PostgreSQL unreachable")
    r = ratios([RESULTS[0], failed])
    assert r["service_over_raw"] is None
    assert "FAILED: PostgreSQL unreachable" in format_table([RESULTS[0], failed])


def test_json_keys(tmp_path: Path) -> None:
    path = write_json(tmp_path / "out" / "bench.json", RESULTS, BenchSpec())
    doc = json.loads(path.read_text())
    assert doc["arms"]["raw"]["items_per_s"] == pytest.approx(10.0)
    assert doc["arms"]["service"]["output_tokens_per_s"] == 0
    assert doc["arms"]["embedded"]["db_ms_per_item"] == 0.5
    assert doc["ratios"]["service_over_raw"] == pytest.approx(0.5)
    assert doc["ratios"]["embedded_over_raw"] == pytest.approx(0.8)
    assert doc["occupancy"]["service"] == 48.0
    assert doc["occupancy"]["embedded"] == 60.0
    assert doc["occupancy_steady"]["service"] is None  # three samples: none falls inside 10-90% done
    assert doc["spec"]["model"] == "tiny"
    # the same keys when those arms did not run
    only_raw = to_json(RESULTS[:1])
    assert only_raw["ratios"]["service_over_raw"] is None
    assert only_raw["occupancy"] == {"service": None, "embedded": None, "raw": None}
    back = ArmResult.from_dict(doc["arms"]["service"])
    assert back == RESULTS[2]


def test_steady_occupancy_leaves_out_ramp_and_drain() -> None:
    # One sample a second over 100 items: 1 running while nothing is done, 64 while 10-90% are, 20 at the end.
    timeline: list[tuple[float, int, float | None]] = [(0.0, 0, None), (1.0, 0, 1.0), (2.0, 10, 40.0)]
    timeline += [(3.0 + i, 10 + 10 * (i + 1), 64.0) for i in range(8)]  # 20 .. 90 items done
    timeline += [(11.0, 100, 20.0)]
    r = ArmResult(
        name="service",
        items=100,
        failed=0,
        seconds=11.0,
        output_tokens=0,
        prompt_tokens=0,
        mean_occupancy=None,
        max_num_seqs=64,
        prep_ms_per_image=None,
        db_ms_per_item=None,
        timeline=timeline,
    )
    assert r.steady_occupancy == pytest.approx(64.0)
    assert "64.0/64" in format_table([r])
    assert to_json([r])["occupancy_steady"]["service"] == pytest.approx(64.0)
    assert ArmResult(**{**r.__dict__, "items": 0}).steady_occupancy is None


def test_table_lists_every_arm() -> None:
    table = format_table(RESULTS)
    for name in ("raw", "embedded", "service", "serve_c32"):
        assert name in table
    assert "service_over_raw = 0.50" in table
    assert "48.0/64" in table


def test_knee() -> None:
    assert knee([(8, 5.0), (16, 9.0), (32, 9.6), (64, 10.0), (128, 9.9)]) == 32
    assert knee([(64, 10.0), (8, 10.0)]) == 8  # the smallest value, whatever the order
    assert knee([(1, 0.0)]) is None
    assert knee([]) is None
    points = {"raw": [SweepPoint(v, arm("raw", 100, s)) for v, s in ((8, 20.0), (16, 10.5), (32, 10.0))]}
    assert "knee at max_num_seqs=16" in format_sweep("max_num_seqs", points)


def test_parse_sweep() -> None:
    assert parse_sweep("max_num_seqs=8,16,32") == ("max_num_seqs", [8, 16, 32])
    assert parse_sweep("chunk-size=16,16,64") == ("chunk_size", [16, 64])
    for bad in ("dtype=1,2", "max_num_seqs", "max_num_seqs=a,b", "max_visual_tokens="):
        with pytest.raises(SweepError):
            parse_sweep(bad)


def test_sweep_runs_each_value(tmp_path: Path) -> None:
    seen: list[tuple[int, int]] = []

    def fake_run(spec: BenchSpec, arms: dict[str, object], **_: object) -> list[ArmResult]:
        seen.append((spec.max_num_seqs, spec.chunk_size))
        return [arm(name, 100, 100 / min(spec.max_num_seqs, 32)) for name in arms]

    spec = BenchSpec(chunk_size=7)
    out = tmp_path / "log.txt"
    with out.open("w") as fh:
        pts = run_sweep(spec, "max_num_seqs", [8, 32, 64], {"raw": ARMS["raw"]}, run=fake_run, inputs=object(), out=fh)  # type: ignore[arg-type]
    assert seen == [(8, 7), (32, 7), (64, 7)]
    assert [p.value for p in pts["raw"]] == [8, 32, 64]
    assert "knee at max_num_seqs=32" in out.read_text()


def test_unknown_arm() -> None:
    with pytest.raises(UnknownArm, match="known arms: raw, serve_c1, serve_c32"):
        parse_arms("raw,bogus", ["raw", "serve_c1", "serve_c32"])
    assert parse_arms("serve_c32,raw", ["raw", "serve_c1", "serve_c32"]) == ("raw", "serve_c32")
    assert parse_arms(None, ["serve_c1", "raw"]) == ("raw", "serve_c1")
    with pytest.raises(UnknownArm):
        select_arms(["nope"])
    assert set(ARMS) >= {"raw", "serve_c1", "serve_c32"}


def test_spec_variants_and_engine_args() -> None:
    spec = BenchSpec(images_per_prompt=6)
    assert spec.engine_args()["limit_images_per_prompt"] == 6
    assert spec.with_changes(max_num_seqs=8).engine["max_num_seqs"] == 8
    assert spec.with_changes(max_num_seqs=8).engine["dtype"] == "float32"
    with pytest.raises(ValueError):
        BenchSpec(engine={"max_num_seqs": 0})


def test_warmup_split_and_items(tmp_path: Path) -> None:
    warm = [tmp_path / "warmup" / f"{i}.jpg" for i in range(2)]
    timed = [tmp_path / "album" / f"{i}.jpg" for i in range(5)]
    spec = BenchSpec(warmup_items=2)
    assert split_warmup(spec, warm + timed) == (warm, timed)
    assert split_warmup(spec, timed) == (timed[:2], timed[2:])  # one folder: by count
    assert [len(g) for g in group_items(timed, 2)] == [2, 2, 1]


def test_timeline_helpers() -> None:
    assert mean_running([(0.0, 0, 0.0), (1.0, 5, 4.0), (3.0, 10, 2.0)]) == pytest.approx((0 * 1 + 4 * 2) / 3)
    assert mean_running([(0.0, 0, None)]) is None
    curve = throughput_curve(arm("raw", 100, 10.0), window_s=1.0)
    assert curve[-1] == (10.0, pytest.approx(10.0))


def test_serve_flags_and_metrics() -> None:
    flags = cli_flags(
        {
            "model": "m",
            "dtype": "float32",
            "enforce_eager": True,
            "enable_prefix_caching": False,
            "limit_mm_per_prompt": {"image": 4},
            "kv_cache_memory_bytes": 1024,
            "max_num_batched_tokens": None,
        }
    )
    assert flags == [
        "--dtype",
        "float32",
        "--enforce-eager",
        "--no-enable-prefix-caching",
        "--limit-mm-per-prompt",
        '{"image": 4}',
        "--kv-cache-memory-bytes",
        "1024",
    ]
    text = '# HELP x\nvllm:num_requests_running{engine="0",model_name="m"} 7.0\nvllm:num_requests_running_x 3\n'
    assert metric_value(text, "vllm:num_requests_running") == 7.0
    assert metric_value("", "vllm:num_requests_running") is None


def test_run_bench_in_process_keeps_going_after_a_failure(tmp_path: Path) -> None:
    from benchmarks.harness.inputs import BenchInputs

    inputs = BenchInputs(model_dir=tmp_path, warmup=[tmp_path / "w" / "0.jpg"], photos=[tmp_path / "a" / "0.jpg"])
    calls: list[list[Path]] = []

    def ok(spec: BenchSpec, model_dir: Path, photos: list[Path]) -> ArmResult:
        calls.append(photos)
        return arm("whatever", 1, 1.0)

    def boom(spec: BenchSpec, model_dir: Path, photos: list[Path]) -> ArmResult:
        raise RuntimeError("no engine")

    assert reference(ok) is None  # a local function runs in this process
    assert reference(ARMS["raw"]) == "benchmarks.harness.raw:run_raw"
    res = run_bench(BenchSpec(), {"first": boom, "second": ok}, inputs=inputs)
    assert [r.name for r in res] == ["first", "second"]
    assert res[0].error == "RuntimeError: no engine"
    assert calls == [inputs.arm_photos()]


def test_plot_written(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="matplotlib (dev extra) is not installed")
    path = write_plot(tmp_path / "bench.png", RESULTS)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

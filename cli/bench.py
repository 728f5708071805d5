"""``vlbatch bench``: the harness in ``benchmarks.harness`` driven from the command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError

from cli.progress import progress


def bench(
    model: Annotated[
        str, typer.Option(help="tiny, reference (generated random weights) or a model directory.")
    ] = "tiny",
    photos: Annotated[int, typer.Option(min=1, max=100_000, help="Timed photos (warm-up photos come on top).")] = 200,
    size: Annotated[str, typer.Option(help="Photo size, WxH.")] = "1600x1200",
    max_visual_tokens: Annotated[int, typer.Option(min=4, help="Visual-token budget per image.")] = 256,
    max_num_seqs: Annotated[int, typer.Option(min=1, help="Concurrent sequences in the engine.")] = 64,
    chunk_size: Annotated[int, typer.Option(min=1, help="Items per chunk (embedded and service arms).")] = 32,
    images_per_prompt: Annotated[int, typer.Option(min=1, help="Photos per item.")] = 1,
    arms: Annotated[
        str | None, typer.Option(help="Comma-separated arms, default all: raw,embedded,service,serve_c1,serve_c32.")
    ] = None,
    warmup: Annotated[int, typer.Option(min=0, help="Untimed warm-up items each arm runs first.")] = 4,
    workdir: Annotated[Path, typer.Option(help="Where the model and photos go (reused by later runs).")] = Path(
        "vlbatch-bench"
    ),
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the figures as JSON here.")] = None,
    plot: Annotated[Path | None, typer.Option(help="Write a PNG of throughput and occupancy over time here.")] = None,
    sweep: Annotated[
        str | None,
        typer.Option(
            help="PARAM=V1,V2,... with PARAM chunk_size, max_num_seqs, max_visual_tokens or images_per_prompt."
        ),
    ] = None,
    engine: Annotated[str | None, typer.Option(help="Further engine arguments as JSON (EngineConfig fields).")] = None,
    rounds: Annotated[
        int, typer.Option(min=1, max=20, help="Run the arms this many times, interleaved; report each arm's median.")
    ] = 1,
    pg_admin_url: str = "postgresql://127.0.0.1:5432/test",
    redis_url: str = "redis://127.0.0.1:6379/14",
) -> None:
    """Items/s of raw LLM.generate, embedded tag, the service path and vllm serve on the same inputs, in one run."""
    from benchmarks.harness.arms import UnknownArm, parse_arms, select_arms
    from benchmarks.harness.report import print_report, write_json, write_plot
    from benchmarks.harness.rounds import format_rounds, median_results, rounds_json
    from benchmarks.harness.run import run_bench
    from benchmarks.harness.spec import DEFAULT_ENGINE, BenchSpec
    from benchmarks.harness.sweep import SweepError, parse_sweep, run_sweep, sweep_json

    try:
        w, h = (int(v) for v in size.lower().split("x"))
    except ValueError:
        raise typer.BadParameter(f"--size must be WxH, e.g. 1600x1200, not {size!r}") from None
    try:
        names = parse_arms(arms)
        swept = parse_sweep(sweep) if sweep else None
    except (UnknownArm, SweepError) as exc:
        raise typer.BadParameter(str(exc)) from exc
    try:
        extra = json.loads(engine) if engine else {}
    except json.JSONDecodeError as exc:
        raise typer.BadParameter(f"--engine is not JSON: {exc}") from exc
    if not isinstance(extra, dict):
        raise typer.BadParameter("--engine must be a JSON object")
    try:
        spec = BenchSpec(
            model=model,
            n_photos=photos,
            photo_size=(w, h),
            max_visual_tokens=max_visual_tokens,
            images_per_prompt=images_per_prompt,
            engine={**DEFAULT_ENGINE, **extra, "max_num_seqs": max_num_seqs},
            chunk_size=chunk_size,
            arms=names,
            pg_admin_url=pg_admin_url,
            redis_url=redis_url,
            warmup_items=warmup,
            work_dir=workdir.resolve(),
        )
    except ValidationError as exc:
        raise typer.BadParameter(str(exc)) from exc
    if swept is not None:
        param, values = swept
        sweep_arms = select_arms(names)
        with progress("arm") as (start, advance):  # an arm at one value, engine load included
            start(len(values) * len(sweep_arms))
            points = run_sweep(spec, param, values, sweep_arms, on_result=lambda _: advance(1))
        if json_path:
            json_path.parent.mkdir(parents=True, exist_ok=True)
            json_path.write_text(json.dumps(sweep_json(param, points, spec), indent=2))
        failed = any(p.result.error for pts in points.values() for p in pts)
        raise typer.Exit(1 if failed else 0)
    chosen = select_arms(names)
    with progress("arm") as (start, advance):  # an arm's run, engine load included
        start(len(chosen) * rounds)
        every = run_bench(spec, chosen, rounds=rounds, on_result=lambda _: advance(1))
    results = median_results(every)
    print_report(results)
    if rounds > 1:
        typer.echo("\n" + format_rounds(every, rounds))
    if json_path:
        extra_json = rounds_json(every, rounds) if rounds > 1 else None
        typer.echo(f"figures -> {write_json(json_path, results, spec, extra=extra_json)}")
    if plot:
        try:
            typer.echo(f"plot -> {write_plot(plot, results)}")
        except RuntimeError as exc:
            typer.echo(f"vlbatch bench: {exc}", err=True)
            raise typer.Exit(1) from None
    if any(r.error for r in every):
        raise typer.Exit(1)

"""The device and the model on it: ``doctor`` (checks), ``plan`` (sizing) and ``quantize`` (W8A8)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

from cli.progress import progress


def doctor(
    kernels: Annotated[bool, typer.Option("--kernels", help="Also run the kernel parity harness.")] = False,
    canary: Annotated[
        bool,
        typer.Option(
            "--canary",
            help="Also load the engine of VLBATCH_MODEL_PATH and send the worker's canary (one image, one text"
            " request); a crash or hang names the platform's known remedies.",
        ),
    ] = False,
    require_npu: Annotated[
        bool | None, typer.Option("--require-npu/--no-require-npu", help="Default: required when devices are set.")
    ] = None,
) -> None:
    """Check devices, driver mounts, versions and settings; exit 1 with one line per problem."""
    from cli.doctor import main as doctor_main

    raise typer.Exit(doctor_main(kernels=kernels, canary=canary, require_npu=require_npu))


def plan(
    model: Annotated[Path, typer.Argument(help="Model directory or its config.json.")],
    quant: Annotated[str, typer.Option(help="fp16, w8a8 or w4a8.")] = "fp16",
    card: str = "atlas-300i-duo",
    cards: int = 1,
    device_ids: Annotated[str | None, typer.Option(help="npu-smi Device ids, e.g. 0,1,4,5.")] = None,
    max_model_len: int = 8192,
    visual_tokens: int = 1024,
    images_per_prompt: int = 1,
    prompt_tokens: int = 256,
    output_tokens: int = 256,
    gpu_memory_utilization: float | None = None,
    max_num_seqs: int | None = None,
    tp: int | None = None,
    accounting: Annotated[str, typer.Option(help="310P KV accounting: halved (>=0.18) or legacy.")] = "halved",
    efficiency: float = 0.5,
    dtype: Annotated[
        str, typer.Option(help="Engine dtype: auto (the platform's), float16, bfloat16, float32.")
    ] = "auto",
    cann: Annotated[
        str | None, typer.Option(help="CANN version on the Ascend host (doctor prints it); below 9.0 plans eager.")
    ] = None,
    compose: Annotated[
        bool, typer.Option("--compose", help="Print a compose file (same as --render compose).")
    ] = False,
    render: Annotated[
        Literal["text", "compose", "k8s"],
        typer.Option(help="text (the plan), compose (a compose file) or k8s (the model's Kubernetes worker set)."),
    ] = "text",
    backlog_s: Annotated[
        float, typer.Option(help="k8s: seconds of queued work per worker before KEDA adds one (sets listLength).")
    ] = 120.0,
    image: str = "vlbatch:310p",
) -> None:
    """Size weights, KV cache, layout, rooflines and launch arguments for MODEL on a device set."""
    from engine.planning.command import parse_ids, run_plan
    from engine.planning.planner import Plan, PlanError

    try:
        ids = parse_ids(device_ids)
    except PlanError as e:
        typer.echo(f"vlbatch plan: {e}", err=True)
        raise typer.Exit(2) from None
    renderer = None
    if render == "k8s":
        from cli.kubernetes import render_k8s
        from vlbatch.settings import get_settings

        settings = get_settings()

        def renderer(p: Plan) -> str:
            return render_k8s(
                p,
                image=image,
                chunk_size=settings.scheduling.chunk_size,
                drain_timeout_s=settings.worker.drain_timeout_s,
                backlog_s=backlog_s,
            )

    raise typer.Exit(
        run_plan(
            model,
            compose=compose or render == "compose",
            renderer=renderer,
            image=image,
            quantization=quant,
            card=card,
            cards=cards,
            device_ids=ids,
            max_model_len=max_model_len,
            visual_tokens_per_image=visual_tokens,
            images_per_prompt=images_per_prompt,
            prompt_text_tokens=prompt_tokens,
            output_tokens=output_tokens,
            gpu_memory_utilization=gpu_memory_utilization,
            max_num_seqs=max_num_seqs,
            tensor_parallel_size=tp,
            accounting=accounting,
            efficiency=efficiency,
            dtype=dtype,
            cann_version=cann,
        )
    )


def quantize(
    model: Annotated[Path, typer.Argument(help="Float Hugging Face model directory (safetensors).")],
    out: Annotated[Path, typer.Argument(help="New directory for the W8A8 checkpoint vllm-ascend loads on 310P.")],
    cpu_out: Annotated[
        Path | None, typer.Option(help="Also write a compressed-tensors INT8 copy for vLLM CPU/GPU here.")
    ] = None,
    prompt: Annotated[list[str] | None, typer.Option(help="Calibration prompt (repeatable).")] = None,
    image: Annotated[list[Path] | None, typer.Option(help="Calibration image (repeatable; vision models).")] = None,
    keep_float: Annotated[
        list[str] | None, typer.Option(help="Regex of linear layers to keep float, added to vision/lm_head.")
    ] = None,
    smooth_alpha: Annotated[float | None, typer.Option(help="SmoothQuant migration strength (0-1).")] = None,
    cpu_activations: Annotated[str, typer.Option(help="static (as on 310P) or dynamic per-token.")] = "static",
) -> None:
    """Quantize MODEL to W8A8 (vision tower, embeddings, lm_head and norms stay fp16) on this CPU."""
    from kernels.quantize import DEFAULT_PROMPTS, QuantizeOptions, quantize_model
    from kernels.quantize_errors import QuantizeError

    try:
        opts = QuantizeOptions(
            prompts=tuple(prompt) if prompt else DEFAULT_PROMPTS,
            images=tuple(image or ()),
            extra_keep_float=tuple(keep_float or ()),
            smooth_alpha=smooth_alpha,
            cpu_activations=cpu_activations,  # type: ignore[arg-type]  # checked by QuantizeOptions
        )
        with progress("step") as (start, advance):  # calibration samples, then layers
            report = quantize_model(model, out, cpu_out=cpu_out, options=opts, on_start=start, on_progress=advance)
    except QuantizeError as e:
        typer.echo(f"vlbatch quantize: {e}", err=True)
        raise typer.Exit(2) from None
    typer.echo(report.format())

"""``vlbatch quantize``: calibrate on CPU, write the 310P and CPU checkpoints atomically, report the error."""

from __future__ import annotations

import logging
import shutil
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kernels.quantize import calibrate, evaluate, export, layers, plan
from kernels.quantize.plan import Checkpoint, QuantizeOptions, inspect
from kernels.quantize_errors import QuantizeError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class QuantizeReport:
    source: Path
    ascend_dir: Path
    cpu_dir: Path | None
    quantized: list[str]
    kept_float: list[str]  # linear layers left in float (vision tower, lm_head, patterns)
    fp16_bytes: int  # the source model's parameters at 2 bytes each
    ascend_bytes: int  # the 310P checkpoint's weight files
    linear_fp16_bytes: int  # the quantized layers' weights at fp16
    linear_w8a8_bytes: int  # the same layers' seven W8A8 tensors
    linears: list[evaluate.LinearError]
    model: evaluate.ModelError

    def format(self) -> str:
        lines = [
            f"W8A8 (310P) checkpoint: {self.ascend_dir}"
            + (f"; CPU (compressed-tensors): {self.cpu_dir}" if self.cpu_dir else ""),
            f"linear layers: {len(self.quantized)} W8A8, {len(self.kept_float)} kept float",
            f"size: fp16 {self.fp16_bytes / 2**20:.2f} MiB -> W8A8 {self.ascend_bytes / 2**20:.2f} MiB "
            f"({self.ascend_bytes / max(self.fp16_bytes, 1):.2f}x); quantized layers alone: "
            f"{self.linear_fp16_bytes / 2**20:.2f} MiB -> {self.linear_w8a8_bytes / 2**20:.2f} MiB "
            f"({self.linear_w8a8_bytes / max(self.linear_fp16_bytes, 1):.2f}x)",
            f"{'layer':<48} {'N x K':>11} {'in_scale':>9} {'off':>5} {'cosine':>8} {'rel_err':>8}",
        ]
        for e in self.linears:
            lines.append(
                f"{e.prefix:<48} {f'{e.shape[0]}x{e.shape[1]}':>11} {e.input_scale:>9.3g} {e.input_offset:>5d} "
                f"{e.cosine:>8.5f} {e.rel_error:>8.4f}"
            )
        hidden = " ".join(f"{c:.4f}" for c in self.model.hidden_cosine)
        lines += [
            f"hidden-state cosine, embeddings then each decoder layer (worst sample): {hidden}",
            f"logits cosine (worst sample): {self.model.logits_cosine:.5f}; "
            f"top-1 agreement: {self.model.top1_agreement:.1%}",
        ]
        return "\n".join(lines)


def _staging(target: Path) -> Path:
    if target.exists():
        raise QuantizeError(f"output {target} already exists; remove it or choose another directory")
    if not target.parent.is_dir():
        raise QuantizeError(f"parent directory of {target} does not exist; create {target.parent} first")
    # Beside the target, so the final rename stays on one filesystem and is atomic.
    return target.parent / f".{target.name}.partial-{uuid.uuid4().hex[:8]}"


def _fp16_bytes(ckpt: Checkpoint) -> int:
    total = 0
    for _, dtype, shape in ckpt.tensors.values():
        n = 1
        for d in shape:
            n *= d
        total += n * (2 if dtype in ("F32", "F16", "BF16", "F64") else {"I8": 1, "U8": 1, "BOOL": 1}.get(dtype, 8))
    return total


def quantize_model(
    source: Path,
    out: Path,
    *,
    cpu_out: Path | None = None,
    options: QuantizeOptions | None = None,
    on_start: Callable[[int], None] | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> QuantizeReport:
    """Quantize ``source`` to W8A8: ``out`` for vllm-ascend on 310P, ``cpu_out`` (optional) for vLLM CPU.

    Nothing is left at ``out``/``cpu_out`` unless both were written completely. Progress is counted in steps:
    ``on_start(total)`` once the model is loaded, then ``on_progress(1)`` per calibration sample and per layer
    quantized.
    """
    opts = options or QuantizeOptions()
    ckpt = inspect(source)
    if ckpt.kind == "text" and opts.images:
        raise QuantizeError(
            f"{ckpt.architecture} is a text model but {len(opts.images)} calibration image(s) were given; "
            "drop --image or quantize a vision-language model"
        )
    for p in opts.images:
        if not p.is_file():
            raise QuantizeError(f"calibration image {p} does not exist")
    if cpu_out is not None and cpu_out.resolve() == out.resolve():
        raise QuantizeError(f"--cpu-out {cpu_out} is the same directory as the 310P output; give two directories")
    stage = _staging(out)
    cpu_stage = _staging(cpu_out) if cpu_out is not None else None
    published: list[Path] = []
    try:
        loaded = calibrate.load(ckpt)
        selected = [p for p in loaded.linears if not opts.keeps_float(p)]
        kept = [p for p in loaded.linears if opts.keeps_float(p)]
        if not selected:
            raise QuantizeError(f"every linear layer of {source} matches a --keep-float pattern; nothing to quantize")
        vision = plan.quantized_vision_layers(selected)
        if vision:
            raise QuantizeError(
                f"{len(vision)} vision-tower linears of {source} would be quantized ({vision[0]}, ...):"
                f" {plan.VISION_REFUSAL}; keep the vision tower float (the default keep_float patterns)"
            )
        log.info("calibrating %d linear layers of %s on %d samples", len(selected), source, len(opts.prompts))
        if on_start is not None:
            on_start(len(opts.prompts) + len(selected))
        stats = calibrate.calibrate(loaded, ckpt, opts, selected, on_sample=on_progress)
        qlayers, smoothing = layers.build(
            ckpt, loaded.linears, stats, smooth_alpha=opts.smooth_alpha, on_layer=on_progress
        )
        export.write_ascend(ckpt, qlayers, smoothing, stage)
        if cpu_stage is not None:
            export.write_compressed_tensors(
                ckpt,
                qlayers,
                smoothing,
                cpu_stage,
                float_linears=kept,
                keep_float=(*opts.keep_float, *opts.extra_keep_float),
                activations=opts.cpu_activations,
            )
        linear_err = evaluate.linear_errors(qlayers)
        model_err = evaluate.model_error(loaded, ckpt, opts, qlayers)
        ascend_bytes = sum(p.stat().st_size for p in stage.glob("*.safetensors"))
        stage.rename(out)
        published.append(out)
        if cpu_stage is not None and cpu_out is not None:
            cpu_stage.rename(cpu_out)
    except BaseException:
        for d in (stage, cpu_stage, *published):
            if d is not None:
                shutil.rmtree(d, ignore_errors=True)
        raise
    lin_fp16 = sum(q.float_weight.numel() * 2 for q in qlayers.values())
    lin_w8a8 = sum(sum(t.numel() * t.element_size() for t in vars(q.ascend).values()) for q in qlayers.values())
    return QuantizeReport(
        source,
        out,
        cpu_out,
        list(qlayers),
        kept,
        _fp16_bytes(ckpt),
        ascend_bytes,
        lin_fp16,
        lin_w8a8,
        linear_err,
        model_err,
    )

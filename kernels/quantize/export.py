"""Write the quantized checkpoint twice: for vllm-ascend on 310P (ModelSlim W8A8) and for vLLM CPU.

Ascend (ModelSlim layout, what vllm-ascend's 310P ``AscendModelSlimConfig310`` loads): every tensor is
listed in ``quant_model_description.json`` as "W8A8" or "FLOAT" under its checkpoint name (vllm-ascend
maps the names to its own modules); each W8A8 linear carries weight int8 (N, K), weight_scale and
weight_offset (N, 1) fp16, input_scale (1,) fp16, input_offset (1,) int8, quant_bias (N,) int32 and
deq_scale (N,) int64 (fp16 models); everything else is fp16, the only dtype 310P runs.

CPU (compressed-tensors ``int-quantized``, what vLLM's CompressedTensorsW8A8Int8 loads): weight int8
(N, K) and weight_scale (N, 1) per channel; with static activations also input_scale (1,) and
input_zero_point (1,) int8, the very same per-tensor range as the 310P export; float tensors keep
their original dtype.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import torch

from kernels.quantize.layers import QuantLayer
from kernels.quantize.plan import Checkpoint
from kernels.quantize_errors import QuantizeError

DESCRIPTION_FILE = "quant_model_description.json"
ASCEND_WEIGHTS = "quant_model_weight_w8a8"
SHARD_BYTES = 4 << 30
FP16_MAX = 65504.0
# Weight files and indexes are rewritten; everything else (tokenizer, processor, chat template) is copied.
_NOT_COPIED = (".safetensors", ".bin", ".pt", ".pth", ".index.json")


def _float_tensors(ckpt: Checkpoint) -> Iterator[tuple[str, torch.Tensor]]:
    from safetensors import safe_open

    for f in ckpt.files:
        with safe_open(str(f), "pt") as h:
            for name in h.keys():  # noqa: SIM118  (safe_open handles are not iterable)
                yield name, h.get_tensor(name)


def _copy_side_files(src: Path, dst: Path) -> None:
    for p in src.iterdir():
        if p.is_file() and p.name != "config.json" and not p.name.endswith(_NOT_COPIED):
            shutil.copy2(p, dst / p.name)


class _ShardWriter:
    """Accumulate tensors and flush a safetensors shard every SHARD_BYTES, so big models stream."""

    def __init__(self, out: Path, stem: str) -> None:
        self.out, self.stem = out, stem
        self.pending: dict[str, torch.Tensor] = {}
        self.size = 0
        self.written: list[Path] = []

    def add(self, name: str, t: torch.Tensor) -> None:
        # A private copy: scales shared by q/k/v would otherwise alias, which safetensors refuses.
        self.pending[name] = t.detach().contiguous().clone()
        self.size += t.numel() * t.element_size()
        if self.size >= SHARD_BYTES:
            self.flush()

    def flush(self) -> None:
        from safetensors.torch import save_file

        if not self.pending:
            return
        path = self.out / f"{self.stem}-part{len(self.written):05d}.safetensors"
        save_file(self.pending, str(path), metadata={"format": "pt"})
        self.written.append(path)
        self.pending, self.size = {}, 0

    def close(self) -> list[Path]:
        self.flush()
        if len(self.written) == 1:  # one file: the plain name vllm-ascend's published checkpoints use
            final = self.out / f"{self.stem}.safetensors"
            self.written[0].rename(final)
            self.written = [final]
        return self.written


def _set_dtype(cfg: dict[str, Any], dtype: str) -> None:
    for sub in (cfg, cfg.get("text_config"), cfg.get("vision_config")):
        if isinstance(sub, dict):
            for key in ("torch_dtype", "dtype"):
                if key in sub or sub is cfg:
                    sub[key] = dtype


def _smoothed(name: str, t: torch.Tensor, smoothing: dict[str, torch.Tensor]) -> torch.Tensor:
    s = smoothing.get(name)
    return t if s is None else (t.to(torch.float32) / s).to(t.dtype)


def _to_fp16(name: str, t: torch.Tensor) -> torch.Tensor:
    """fp16 is the only float dtype 310P runs; a bf16/fp32 value beyond its range would become inf."""
    peak = float(t.abs().max()) if t.numel() else 0.0
    if peak > FP16_MAX:
        raise QuantizeError(
            f"{name} holds {peak:.4g}, beyond fp16's {FP16_MAX}: 310P cannot run this tensor in fp16; "
            "this model needs bf16, which the 310P does not support"
        )
    return t.to(torch.float16)


def write_ascend(
    ckpt: Checkpoint, layers: dict[str, QuantLayer], smoothing: dict[str, torch.Tensor], out: Path
) -> dict[str, str]:
    """The 310P W8A8 checkpoint in ``out``; returns the description it wrote."""
    out.mkdir(parents=True)
    desc: dict[str, str] = {"model_quant_type": "W8A8"}
    shards = _ShardWriter(out, ASCEND_WEIGHTS)
    for name, t in _float_tensors(ckpt):
        prefix, _, leaf = name.rpartition(".")
        layer = layers.get(prefix)
        if layer is not None and leaf == "weight":
            q = layer.ascend
            for suffix, value in (
                ("weight", q.weight),
                ("weight_scale", q.weight_scale),
                ("weight_offset", q.weight_offset),
                ("input_scale", q.input_scale),
                ("input_offset", q.input_offset),
                ("quant_bias", q.quant_bias),
                ("deq_scale", q.deq_scale),
            ):
                shards.add(f"{prefix}.{suffix}", value)
                desc[f"{prefix}.{suffix}"] = "W8A8"
        elif layer is not None and leaf == "bias":
            # vLLM still creates the float bias parameter and checks it was loaded; the 310P forward
            # uses quant_bias (which already folds it) instead.
            shards.add(name, _to_fp16(name, t))
            desc[name] = "W8A8"
        else:
            t = _smoothed(name, t, smoothing)
            if t.is_floating_point():
                t = _to_fp16(name, t)
            shards.add(name, t)
            desc[name] = "FLOAT"
    shards.close()
    cfg = json.loads(json.dumps(ckpt.config))
    _set_dtype(cfg, "float16")
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    (out / DESCRIPTION_FILE).write_text(json.dumps(desc, indent=2))
    _copy_side_files(ckpt.path, out)
    return desc


def compressed_tensors_config(
    ignore: list[str], keep_float: tuple[str, ...], activations: Literal["static", "dynamic"]
) -> dict[str, Any]:
    """config.json ``quantization_config`` for INT8 W8A8 in compressed-tensors' int-quantized format."""
    if activations == "static":
        inputs = {"num_bits": 8, "type": "int", "symmetric": False, "strategy": "tensor", "dynamic": False}
    else:
        inputs = {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "token", "dynamic": True}
    weights = {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "channel", "dynamic": False}
    return {
        "quant_method": "compressed-tensors",
        "format": "int-quantized",
        "quantization_status": "compressed",
        "config_groups": {
            "group_0": {
                "targets": ["Linear"],
                "weights": weights,
                "input_activations": inputs,
                "output_activations": None,
            }
        },
        # Exact names for the layers we saw, and the patterns (vLLM matches "re:" with re.match) for any
        # linear vLLM builds that transformers does not (e.g. a patch embedding done as a linear).
        "ignore": [*ignore, *(f"re:.*(?:{p})" for p in keep_float)],
        "kv_cache_scheme": None,
    }


def write_compressed_tensors(
    ckpt: Checkpoint,
    layers: dict[str, QuantLayer],
    smoothing: dict[str, torch.Tensor],
    out: Path,
    *,
    float_linears: list[str],
    keep_float: tuple[str, ...],
    activations: Literal["static", "dynamic"],
) -> None:
    """The vLLM CPU checkpoint (compressed-tensors) in ``out``."""
    out.mkdir(parents=True)
    shards = _ShardWriter(out, "model")
    for name, t in _float_tensors(ckpt):
        prefix, _, leaf = name.rpartition(".")
        layer = layers.get(prefix)
        if layer is not None and leaf == "weight":
            shards.add(name, layer.ascend.weight)
            shards.add(f"{prefix}.weight_scale", layer.weight_scale32)
            if activations == "static":
                # The 310P's fp16 scale, widened: both engines then quantize activations identically.
                shards.add(f"{prefix}.input_scale", layer.ascend.input_scale.to(torch.float32))
                shards.add(f"{prefix}.input_zero_point", layer.ascend.input_offset)
        else:
            shards.add(name, _smoothed(name, t, smoothing))
    shards.close()
    cfg = json.loads(json.dumps(ckpt.config))
    cfg["quantization_config"] = compressed_tensors_config(float_linears, keep_float, activations)
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    _copy_side_files(ckpt.path, out)

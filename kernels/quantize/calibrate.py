"""Load the float model on CPU, find its linear layers in the checkpoint, and record their input ranges."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from kernels.quantize.plan import Checkpoint, QuantizeOptions
from kernels.quantize_errors import QuantizeError

log = logging.getLogger(__name__)


@dataclass
class LayerStats:
    """Per-input-channel min/max over all calibration tokens, plus a bounded sample for the error table."""

    cmin: torch.Tensor
    cmax: torch.Tensor
    samples: list[torch.Tensor] = field(default_factory=list)
    rows: int = 0

    def add(self, x: torch.Tensor, limit: int) -> None:
        x = x.detach().reshape(-1, x.shape[-1]).to(torch.float32)
        self.cmin = torch.minimum(self.cmin, x.amin(dim=0))
        self.cmax = torch.maximum(self.cmax, x.amax(dim=0))
        if self.rows < limit:
            take = x[: limit - self.rows].clone()
            self.samples.append(take)
            self.rows += take.shape[0]

    def sample(self) -> torch.Tensor:
        return torch.cat(self.samples) if self.samples else torch.zeros(0, self.cmin.shape[0])


@dataclass
class Loaded:
    model: Any
    processor: Any
    linears: dict[str, torch.nn.Linear]  # checkpoint prefix -> module
    module_names: dict[str, str]  # checkpoint prefix -> module name in the loaded model


def load_dtype(ckpt: Checkpoint) -> torch.dtype:
    """bf16 checkpoints calibrate in bf16 (a 32B model in fp32 would need 128 GB); everything else in fp32,
    since CPU fp16 kernels are slow or missing. The kernels upcast to float32 internally either way."""
    text = ckpt.config.get("text_config")
    declared = ckpt.config.get("torch_dtype") or ckpt.config.get("dtype")
    if declared is None and isinstance(text, dict):
        declared = text.get("torch_dtype") or text.get("dtype")
    return torch.bfloat16 if declared == "bfloat16" else torch.float32


def load(ckpt: Checkpoint) -> Loaded:
    """The float model and its processor (vision) or tokenizer (text), on CPU, in eval mode."""
    import transformers

    auto = transformers.AutoModelForImageTextToText if ckpt.kind == "vision" else transformers.AutoModelForCausalLM
    proc_cls = transformers.AutoProcessor if ckpt.kind == "vision" else transformers.AutoTokenizer
    try:
        model = auto.from_pretrained(str(ckpt.path), dtype=load_dtype(ckpt), low_cpu_mem_usage=True)
        processor = proc_cls.from_pretrained(str(ckpt.path))
    except (OSError, ValueError, KeyError, RuntimeError, ImportError) as e:
        raise QuantizeError(
            f"transformers could not load {ckpt.path} as {ckpt.architecture} ({e}); "
            "check that the directory holds the complete model, tokenizer and processor files"
        ) from e
    model.eval()
    linears, names = _match_linears(model, ckpt)
    return Loaded(model, processor, linears, names)


def _match_linears(model: Any, ckpt: Checkpoint) -> tuple[dict[str, torch.nn.Linear], dict[str, str]]:
    """Map each nn.Linear to its checkpoint name by the longest common dotted suffix, then verify the values.

    transformers renames modules on load (``model.layers`` may become ``model.language_model.layers``),
    so names alone are not enough; an equal weight tensor is the proof.
    """
    from safetensors import safe_open

    weights = {n[: -len(".weight")]: v for n, v in ckpt.tensors.items() if n.endswith(".weight") and len(v[2]) == 2}
    by_suffix: dict[str, list[str]] = {}
    for prefix in weights:
        parts = prefix.split(".")
        for i in range(len(parts)):
            by_suffix.setdefault(".".join(parts[i:]), []).append(prefix)
    linears: dict[str, torch.nn.Linear] = {}
    names: dict[str, str] = {}
    for mod_name, mod in model.named_modules():
        if not isinstance(mod, torch.nn.Linear):
            continue
        parts = mod_name.split(".")
        match: str | None = None
        for i in range(len(parts)):
            cands = [c for c in by_suffix.get(".".join(parts[i:]), []) if weights[c][2] == tuple(mod.weight.shape)]
            if len(cands) == 1:
                match = cands[0]
                break
        if match is None:
            continue  # e.g. an lm_head tied to the embeddings: no tensor of its own
        file, _, _ = weights[match]
        with safe_open(str(file), "pt") as h:
            if not torch.equal(h.get_tensor(match + ".weight").to(mod.weight.dtype), mod.weight.detach()):
                raise QuantizeError(f"module {mod_name} matched checkpoint tensor {match}.weight but the values differ")
        linears[match] = mod
        names[match] = mod_name
    return linears, names


def default_images(n: int = 2) -> list[Any]:
    """Synthetic calibration images (gradients and blocks) when the operator gives none."""
    from PIL import Image

    g = torch.Generator().manual_seed(0)
    out = []
    for i in range(n):
        base = torch.linspace(0, 255, 112).repeat(112, 1)
        rgb = torch.stack([base, base.t(), torch.full_like(base, 40.0 * (i + 1))], dim=-1)
        rgb = (rgb + torch.randint(-20, 20, rgb.shape, generator=g)).clamp(0, 255).to(torch.uint8)
        out.append(Image.fromarray(rgb.numpy(), "RGB"))
    return out


def load_images(paths: tuple[Path, ...]) -> list[Any]:
    from PIL import Image, UnidentifiedImageError

    images = []
    for p in paths:
        try:
            with Image.open(p) as im:
                images.append(im.convert("RGB"))
        except (OSError, UnidentifiedImageError) as e:
            raise QuantizeError(f"calibration image {p} cannot be read ({e}); pass JPEG/PNG files") from e
    return images


def batches(loaded: Loaded, ckpt: Checkpoint, opts: QuantizeOptions) -> Iterator[dict[str, torch.Tensor]]:
    """Model inputs, one calibration sample each: every prompt, paired with an image for vision models."""
    if ckpt.kind == "text" and opts.images:
        raise QuantizeError(
            f"{ckpt.architecture} is a text model but {len(opts.images)} calibration image(s) were given; "
            "drop --image or quantize a vision-language model"
        )
    images = (load_images(opts.images) or default_images()) if ckpt.kind == "vision" else []
    for i, prompt in enumerate(opts.prompts):
        if ckpt.kind == "vision":
            messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": prompt}]}]
            text = loaded.processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
            enc = loaded.processor(text=[text], images=[images[i % len(images)]], return_tensors="pt")
        else:
            enc = loaded.processor(prompt, return_tensors="pt")
        yield dict(enc)


def calibrate(
    loaded: Loaded,
    ckpt: Checkpoint,
    opts: QuantizeOptions,
    selected: list[str],
    *,
    on_sample: Callable[[int], None] | None = None,
) -> dict[str, LayerStats]:
    """Run every calibration sample through the float model; record the inputs of the selected linears.
    ``on_sample(1)`` after each sample (a progress bar)."""
    stats: dict[str, LayerStats] = {}
    handles = []
    for prefix in selected:
        mod = loaded.linears[prefix]
        k = mod.in_features
        st = LayerStats(torch.full((k,), float("inf")), torch.full((k,), float("-inf")))
        stats[prefix] = st

        def hook(_m: torch.nn.Module, args: tuple[torch.Tensor, ...], st: LayerStats = st) -> None:
            st.add(args[0], opts.samples_per_layer)

        handles.append(mod.register_forward_pre_hook(hook))
    try:
        with torch.inference_mode():
            for n, batch in enumerate(batches(loaded, ckpt, opts)):
                try:
                    loaded.model(**batch)
                except (RuntimeError, ValueError, TypeError) as e:
                    raise QuantizeError(
                        f"calibration sample {n} ({opts.prompts[n][:40]!r}) failed in the float model ({e}); "
                        "check that prompts and images suit this model"
                    ) from e
                if on_sample is not None:
                    on_sample(1)
    finally:
        for h in handles:
            h.remove()
    unseen = [p for p, s in stats.items() if s.rows == 0]
    if unseen:
        raise QuantizeError(
            f"{len(unseen)} layers never ran during calibration (first: {unseen[0]}); "
            "give calibration data that reaches them or keep them float with --keep-float"
        )
    return stats

"""What to quantize: the checkpoint's tensors, the architectures we know, and the keep-float patterns."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from kernels.quantize_errors import QuantizeError

# Architectures whose linear-layer names, shared-input groups and vLLM / vllm-ascend loaders were checked.
# "vision" ones take calibration images; "text" ones must not be given any.
ARCHITECTURES: dict[str, Literal["vision", "text"]] = {
    "Qwen2VLForConditionalGeneration": "vision",
    "Qwen2_5_VLForConditionalGeneration": "vision",
    "Qwen3VLForConditionalGeneration": "vision",
    "Qwen2ForCausalLM": "text",
    "Qwen3ForCausalLM": "text",
    "LlamaForCausalLM": "text",
}

# Searched (re.search) in a linear layer's checkpoint name. Vision towers stay fp16: low-bit Qwen-VL
# vision towers hallucinate. lm_head stays fp16 as in ModelSlim's defaults (its error reaches the logits
# directly). Embeddings and norms are not linear layers, so they are never candidates at all.
VISION_TOWER = r"(^|\.)(visual|vision_tower|vision_model|multi_modal_projector|mm_projector)\."
DEFAULT_KEEP_FLOAT: tuple[str, ...] = (VISION_TOWER, r"(^|\.)lm_head$")
# Why a W8A8 vision tower is refused outright, whatever the patterns say: vllm-ascend #14152, a W8A8 ViT's qkv bias
# must be INT32 there, and a checkpoint with a quantized vision tower fails to load or runs wrong on 310P.
VISION_REFUSAL = (
    "vllm-ascend runs the vision tower of a W8A8 checkpoint in fp16 only (vllm-ascend #14152: a W8A8 ViT qkv bias must"
    " be INT32, which its loader does not give it)"
)


def quantized_vision_layers(selected: list[str]) -> list[str]:
    """The vision-tower linears among those about to be quantized (the layout the quantizer refuses)."""
    return [p for p in selected if re.search(VISION_TOWER, p)]


DEFAULT_PROMPTS: tuple[str, ...] = (
    "Describe this image in one sentence.",
    "What objects are visible, and what colour is each of them?",
    "Read any text in the picture and return it as JSON with a field named text.",
    "Invoice 2024-113: 3 x widgets at 4.50 EUR, total 13.50 EUR. Who is the seller?",
    "The quick brown fox jumps over the lazy dog. Translate this sentence into French.",
    "List three tags for this photo, comma separated.",
)

# Linears that read one activation and the op that produces it (folded into by SmoothQuant).
_SHARED_INPUT = (
    (re.compile(r"^(?P<layer>.*\.layers\.\d+)\.self_attn\.(q|k|v)_proj$"), "input_layernorm"),
    (re.compile(r"^(?P<layer>.*\.layers\.\d+)\.mlp\.(gate|up)_proj$"), "post_attention_layernorm"),
)


@dataclass(frozen=True)
class QuantizeOptions:
    """Everything ``vlbatch quantize`` can be told, each with a working default."""

    prompts: tuple[str, ...] = DEFAULT_PROMPTS
    images: tuple[Path, ...] = ()
    keep_float: tuple[str, ...] = DEFAULT_KEEP_FLOAT
    smooth_alpha: float | None = None
    cpu_activations: Literal["static", "dynamic"] = "static"
    # Rows of calibration input kept per layer for the error table: 256 x K x 4 bytes x 7 linears x 64
    # layers is ~1.5 GB for a 32B model, on top of the model itself.
    samples_per_layer: int = 256
    seed: int = 0
    extra_keep_float: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if not self.prompts:
            raise QuantizeError("no calibration prompts; give at least one --prompt or drop the option")
        if self.smooth_alpha is not None and not 0.0 <= self.smooth_alpha <= 1.0:
            raise QuantizeError(f"--smooth-alpha {self.smooth_alpha} is outside [0, 1]; 0.5 is the usual choice")
        if self.cpu_activations not in ("static", "dynamic"):
            raise QuantizeError(f"--cpu-activations {self.cpu_activations!r}: use 'static' or 'dynamic'")
        for pat in (*self.keep_float, *self.extra_keep_float):
            try:
                re.compile(pat)
            except re.error as e:
                raise QuantizeError(f"--keep-float pattern {pat!r} is not a valid regex: {e}") from e

    def keeps_float(self, prefix: str) -> bool:
        return any(re.search(p, prefix) for p in (*self.keep_float, *self.extra_keep_float))


@dataclass(frozen=True)
class Checkpoint:
    """A Hugging Face model directory: its config and where each tensor lives."""

    path: Path
    config: dict[str, object]
    architecture: str
    kind: Literal["vision", "text"]
    files: tuple[Path, ...]
    tensors: dict[str, tuple[Path, str, tuple[int, ...]]]  # name -> (file, safetensors dtype, shape)


def inspect(path: Path) -> Checkpoint:
    """Read config.json and the safetensors headers; no tensor data is loaded."""
    from safetensors import safe_open

    if not path.is_dir():
        raise QuantizeError(f"model directory {path} does not exist; pass a Hugging Face model directory")
    cfg_path = path / "config.json"
    if not cfg_path.is_file():
        raise QuantizeError(f"{path} has no config.json; pass a Hugging Face model directory")
    try:
        config = json.loads(cfg_path.read_text())
    except json.JSONDecodeError as e:
        raise QuantizeError(f"{cfg_path} is not valid JSON ({e}); re-download the model") from e
    if config.get("quantization_config") or (path / "quant_model_description.json").exists():
        raise QuantizeError(f"{path} is already quantized; quantize the original float checkpoint")
    archs = config.get("architectures") or []
    arch = next((a for a in archs if a in ARCHITECTURES), None)
    if arch is None:
        raise QuantizeError(
            f"architecture {archs or '(none in config.json)'} is not supported; supported: "
            f"{', '.join(sorted(ARCHITECTURES))}"
        )
    files = tuple(sorted(path.glob("*.safetensors")))
    if not files:
        found = sorted(p.name for p in path.iterdir() if p.suffix in (".bin", ".pt", ".pth", ".gguf"))
        hint = f" (found {', '.join(found)}; convert them to safetensors first)" if found else ""
        raise QuantizeError(f"{path} has no *.safetensors weights{hint}")
    tensors: dict[str, tuple[Path, str, tuple[int, ...]]] = {}
    for f in files:
        try:
            with safe_open(str(f), "pt") as h:
                for name in h.keys():  # noqa: SIM118  (safe_open handles are not iterable)
                    sl = h.get_slice(name)
                    tensors[name] = (f, sl.get_dtype(), tuple(sl.get_shape()))
        except Exception as e:  # safetensors raises its own SafetensorError for a corrupt header
            raise QuantizeError(f"{f} is not a readable safetensors file ({e}); re-download it") from e
    return Checkpoint(path, config, arch, ARCHITECTURES[arch], files, tensors)


def shared_input_group(prefix: str) -> tuple[str, str] | None:
    """(group id, producer weight name) for linears that read the same activation, e.g. q/k/v."""
    for pattern, producer in _SHARED_INPUT:
        m = pattern.match(prefix)
        if m:
            return f"{m['layer']}.{producer}", f"{m['layer']}.{producer}.weight"
    return None

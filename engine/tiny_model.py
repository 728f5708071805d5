"""Write random-weight Qwen2-VL model directories that vLLM can load offline.

``write_tiny_qwen2_vl`` is the smallest model that runs every part of the pipeline (tests, the demo);
``write_reference_qwen2_vl`` is a heavier one of the same family for benchmarks, sized so that an item
costs real engine time (a few hundred ms per photo on a laptop CPU) and the overheads around the
engine are measured against a realistic denominator. Both share the tokenizer and chat template.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ModelSize:
    """The shape of a generated Qwen2-VL: language model and vision tower.

    The text head dim is ``hidden_size // num_attention_heads``; the M-RoPE sections must add up to
    half of it. The vision tower's ``vision_embed_dim // vision_num_heads`` is its head dim, and its
    merger projects to ``hidden_size``.
    """

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    vision_depth: int
    vision_embed_dim: int
    vision_num_heads: int
    vision_mlp_ratio: int
    mrope_section: tuple[int, int, int] = (8, 12, 12)

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(f"hidden_size {self.hidden_size} is not a multiple of {self.num_attention_heads} heads")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError("num_attention_heads must be a multiple of num_key_value_heads")
        head_dim = self.hidden_size // self.num_attention_heads
        if 2 * sum(self.mrope_section) != head_dim:
            raise ValueError(f"mrope_section {self.mrope_section} must add up to head_dim/2 = {head_dim // 2}")
        if self.vision_embed_dim % self.vision_num_heads:
            raise ValueError("vision_embed_dim must be a multiple of vision_num_heads")


# Tests and the demo: 2 text layers of width 128 (head dim 64), one vision block.
TINY = ModelSize(
    hidden_size=128,
    intermediate_size=256,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=2,
    vision_depth=1,
    vision_embed_dim=64,
    vision_num_heads=2,
    vision_mlp_ratio=2,
)

# Benchmarks: ~95M parameters (8 text layers of width 1024, 16 query / 4 KV heads of dim 64; 4 vision
# blocks of width 256, head dim 64), so engine time per item dominates as it does with real weights.
REFERENCE = ModelSize(
    hidden_size=1024,
    intermediate_size=2816,
    num_hidden_layers=8,
    num_attention_heads=16,
    num_key_value_heads=4,
    vision_depth=4,
    vision_embed_dim=256,
    vision_num_heads=4,
    vision_mlp_ratio=4,
)

_CORPUS = (
    """The quick brown fox jumps over the lazy dog. A picture shows a cat sitting on a red chair.
Describe the image in one sentence. The answer is yes. The answer is no. There are two people
in the photo. What color is the car? The car is blue. Please return JSON with a caption field.
Invoices, receipts and documents contain numbers, dates, names and totals. Hello world.
"""
    * 20
)

SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
]

CHAT_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for content in message['content'] %}{% if content['type'] == 'image' or 'image' in content %}"
    "<|vision_start|><|image_pad|><|vision_end|>{% elif content['type'] == 'video' or 'video' in content %}"
    "<|vision_start|><|video_pad|><|vision_end|>{% elif 'text' in content %}{{ content['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _train_tokenizer(out_dir: Path, corpus: tuple[str, ...] = ()) -> dict[str, int]:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1000,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    # Extra lines (a trained model's prompts and answers) weigh as much as the base text, so their words
    # become single tokens and the sequences it learns stay short.
    tok.train_from_iterator(_CORPUS.splitlines() + [line for line in corpus for _ in range(20)], trainer=trainer)
    tok.save(str(out_dir / "tokenizer.json"))
    ids: dict[str, int] = {}
    for t in SPECIAL_TOKENS:
        token_id = tok.token_to_id(t)
        if token_id is None:  # the trainer was given these as special tokens; missing means a broken vocab
            raise RuntimeError(f"tokenizer lost special token {t}")
        ids[t] = token_id
    cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 4096,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "bos_token": None,
        "unk_token": None,
        "additional_special_tokens": [t for t in SPECIAL_TOKENS if t not in ("<|endoftext|>", "<|im_end|>")],
        "chat_template": CHAT_TEMPLATE,
        "processor_class": "Qwen2VLProcessor",
    }
    (out_dir / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2))
    (out_dir / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    (out_dir / "special_tokens_map.json").write_text(
        json.dumps(
            {
                "eos_token": "<|im_end|>",
                "pad_token": "<|endoftext|>",
                "additional_special_tokens": cfg["additional_special_tokens"],
            },
            indent=2,
        )
    )
    return {**ids, "_size": tok.get_vocab_size()}


def write_tiny_qwen2_vl(out_dir: Path, *, seed: int = 0) -> Path:
    """The tiny model (``TINY``): loads in seconds, for tests and the demo."""
    return write_qwen2_vl(out_dir, TINY, seed=seed)


def write_reference_qwen2_vl(out_dir: Path, *, seed: int = 0) -> Path:
    """The benchmark reference model (``REFERENCE``): same family and tokenizer, heavy enough to time."""
    return write_qwen2_vl(out_dir, REFERENCE, seed=seed)


def write_qwen2_vl(out_dir: Path, size: ModelSize, *, seed: int = 0, corpus: tuple[str, ...] = ()) -> Path:
    """A random-weight Qwen2-VL of shape ``size`` (float32 safetensors), tokenizer and processor configs.

    ``corpus``: extra lines the tokenizer is trained on as well (the model stays random).
    """
    import torch
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    ids = _train_tokenizer(out_dir, corpus)
    vocab = ((ids["_size"] + 63) // 64) * 64
    tok_ids = dict(
        bos_token_id=ids["<|endoftext|>"],
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|endoftext|>"],
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        vision_token_id=ids["<|vision_pad|>"],
    )
    rope = {
        "type": "mrope",
        "rope_type": "default",
        "mrope_section": list(size.mrope_section),
        "rope_theta": 1000000.0,
    }
    text = dict(
        vocab_size=vocab,
        hidden_size=size.hidden_size,
        intermediate_size=size.intermediate_size,
        num_hidden_layers=size.num_hidden_layers,
        num_attention_heads=size.num_attention_heads,
        num_key_value_heads=size.num_key_value_heads,
        max_position_embeddings=4096,
        rms_norm_eps=1e-6,
        rope_theta=1000000.0,
        rope_scaling=rope,
        rope_parameters=rope,
        hidden_act="silu",
        tie_word_embeddings=False,
        torch_dtype="float32",
        dtype="float32",
        bos_token_id=tok_ids["bos_token_id"],
        eos_token_id=tok_ids["eos_token_id"],
    )
    vision = dict(
        depth=size.vision_depth,
        embed_dim=size.vision_embed_dim,
        hidden_size=size.hidden_size,  # the merger projects the vision tokens to the text width
        hidden_act="quick_gelu",
        mlp_ratio=size.vision_mlp_ratio,
        num_heads=size.vision_num_heads,
        in_channels=3,
        in_chans=3,
        patch_size=14,
        spatial_merge_size=2,
        temporal_patch_size=2,
    )
    config_kwargs: dict[str, Any] = {"text_config": dict(text), "vision_config": vision, **tok_ids}
    config = Qwen2VLConfig(**config_kwargs)
    config.architectures = ["Qwen2VLForConditionalGeneration"]
    torch.manual_seed(seed)
    model: Any = Qwen2VLForConditionalGeneration(config)
    model = model.to(torch.float32)
    model.save_pretrained(out_dir, safe_serialization=True)
    # make sure flat (legacy) keys exist too, which vLLM reads via hf_config / hf_text_config
    cfg = json.loads((out_dir / "config.json").read_text())
    for k, v in {**text, **tok_ids}.items():
        cfg.setdefault(k, v)
    cfg["torch_dtype"] = "float32"
    cfg["architectures"] = ["Qwen2VLForConditionalGeneration"]
    cfg["model_type"] = "qwen2_vl"
    (out_dir / "config.json").write_text(json.dumps(cfg, indent=2))
    image = {
        "image_processor_type": "Qwen2VLImageProcessor",
        "processor_class": "Qwen2VLProcessor",
        "do_resize": True,
        "do_rescale": True,
        "do_normalize": True,
        "do_convert_rgb": True,
        "rescale_factor": 1 / 255,
        "image_mean": [0.48145466, 0.4578275, 0.40821073],
        "image_std": [0.26862954, 0.26130258, 0.27577711],
        "min_pixels": 3136,
        "max_pixels": 200704,
        "size": {"shortest_edge": 3136, "longest_edge": 200704},
        "patch_size": 14,
        "temporal_patch_size": 2,
        "merge_size": 2,
    }
    (out_dir / "preprocessor_config.json").write_text(json.dumps(image, indent=2))
    video = {**image, "video_processor_type": "Qwen2VLVideoProcessor"}
    del video["image_processor_type"]
    (out_dir / "video_preprocessor_config.json").write_text(json.dumps(video, indent=2))
    return out_dir

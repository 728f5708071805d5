"""Write a tiny random-weight Qwen2-VL model directory that vLLM can load offline."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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


def _train_tokenizer(out_dir: Path) -> dict[str, int]:
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
    tok.train_from_iterator(_CORPUS.splitlines(), trainer=trainer)
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
    import torch
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    ids = _train_tokenizer(out_dir)
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
    rope = {"type": "mrope", "rope_type": "default", "mrope_section": [8, 12, 12], "rope_theta": 1000000.0}
    text = dict(
        vocab_size=vocab,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
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
        depth=1,
        embed_dim=64,
        hidden_size=128,
        hidden_act="quick_gelu",
        mlp_ratio=2,
        num_heads=2,
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

"""Supervised fine-tuning of the tiny Qwen2-VL: prompt (chat template, one image) -> exact answer text.

The prompt is rendered by the model's own chat template exactly as ``engine.runtime.chat`` renders it
for the engine, and the loss covers only the answer and its end-of-turn token, so greedy decoding of
the served model writes the answer it was taught. Plain AdamW on CPU with a fixed seed: the same
examples give the same weights.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PIL import Image

from engine.runtime.chat import messages
from engine.tiny_model import TINY, ModelSize, write_qwen2_vl

END_OF_TURN = "<|im_end|>"


@dataclass(frozen=True)
class Example:
    """One image (already at the size the worker would send), the pipeline's prompt and the answer."""

    image: Image.Image
    system: str
    user: str
    answer: str


@dataclass(frozen=True)
class TrainingReport:
    steps: int
    seconds: float
    final_loss: float
    parameters: int


@dataclass
class _Encoded:
    input_ids: Any  # 1-D LongTensor: prompt and answer
    answer_start: int
    token_types: Any  # 1-D: which tokens are image placeholders (M-RoPE positions need it)
    pixel_values: Any
    image_grid_thw: Any


def _prompt(processor: Any, ex: Example) -> str:
    return str(
        processor.tokenizer.apply_chat_template(
            messages(ex.system, ex.user, 1), tokenize=False, add_generation_prompt=True
        )
    )


def _encode(processor: Any, ex: Example) -> _Encoded:
    prompt = _prompt(processor, ex)
    full = processor(text=[prompt + ex.answer + END_OF_TURN], images=[ex.image], return_tensors="pt")
    head = processor(text=[prompt], images=[ex.image], return_tensors="pt")
    ids = full["input_ids"][0]
    n = int(head["input_ids"].shape[1])
    if not bool((ids[:n] == head["input_ids"][0]).all()):  # the answer must not merge into the prompt's last token
        raise ValueError("the answer's tokens do not start where the prompt's end")
    return _Encoded(ids, n, full["mm_token_type_ids"][0], full["pixel_values"], full["image_grid_thw"])


def _batch(items: Sequence[_Encoded], pad_id: int) -> dict[str, Any]:
    import torch

    width = max(len(e.input_ids) for e in items)
    ids = torch.full((len(items), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(items), width), dtype=torch.long)
    labels = torch.full((len(items), width), -100, dtype=torch.long)
    types = torch.zeros((len(items), width), dtype=torch.long)
    for i, e in enumerate(items):
        n = len(e.input_ids)
        ids[i, :n] = e.input_ids
        mask[i, :n] = 1
        types[i, :n] = e.token_types
        labels[i, e.answer_start : n] = e.input_ids[e.answer_start :]
    return {
        "input_ids": ids,
        "attention_mask": mask,
        "labels": labels,
        "mm_token_type_ids": types,
        "pixel_values": torch.cat([e.pixel_values for e in items]),
        "image_grid_thw": torch.cat([e.image_grid_thw for e in items]),
    }


def train_tiny_vl(
    out_dir: Path,
    examples: Sequence[Example],
    *,
    size: ModelSize = TINY,
    steps: int = 600,
    batch_size: int = 16,
    lr: float = 3e-3,
    seed: int = 0,
    corpus: tuple[str, ...] = (),
    log: Callable[[str], None] | None = None,
) -> TrainingReport:
    """Write a fresh tiny model to ``out_dir`` (tokenizer trained on ``corpus`` too), train it, save it."""
    import torch
    from transformers import AutoProcessor, Qwen2VLForConditionalGeneration

    torch.manual_seed(seed)
    rng = random.Random(seed)
    out_dir = Path(out_dir)
    write_qwen2_vl(out_dir, size, seed=seed, corpus=corpus)
    config_text = (out_dir / "config.json").read_text()  # keeps the flat keys vLLM reads
    processor = AutoProcessor.from_pretrained(str(out_dir))
    model: Any = Qwen2VLForConditionalGeneration.from_pretrained(str(out_dir), dtype=torch.float32)
    encoded = [_encode(processor, ex) for ex in examples]
    pad_id = int(processor.tokenizer.pad_token_id)
    optimiser = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    warmup = max(1, steps // 20)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimiser, lambda s: min(1.0, (s + 1) / warmup) * max(0.05, 1 - s / steps)
    )
    model.train()
    started = time.perf_counter()
    order: list[int] = []
    loss_value = float("nan")
    for step in range(steps):
        if len(order) < batch_size:
            fresh = list(range(len(encoded)))
            rng.shuffle(fresh)
            order += fresh
        picked, order = order[:batch_size], order[batch_size:]
        loss = model(**_batch([encoded[i] for i in picked], pad_id)).loss
        optimiser.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimiser.step()
        schedule.step()
        loss_value = float(loss)
        if log and (step % 50 == 0 or step == steps - 1):
            log(f"step {step + 1}/{steps} loss {loss_value:.4f} ({time.perf_counter() - started:.0f} s)")
    model.eval()
    model.save_pretrained(str(out_dir), safe_serialization=True)
    (out_dir / "config.json").write_text(config_text)
    n_params = sum(p.numel() for p in model.parameters())
    return TrainingReport(steps, time.perf_counter() - started, loss_value, n_params)


def hf_greedy(model_dir: Path, examples: Sequence[Example], *, max_new_tokens: int = 96) -> list[str]:
    """Greedy answers of the model with plain transformers (no grammar): the reference for the engine."""
    import torch
    from transformers import AutoProcessor, Qwen2VLForConditionalGeneration

    processor = AutoProcessor.from_pretrained(str(model_dir))
    model: Any = Qwen2VLForConditionalGeneration.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    eos = int(processor.tokenizer.convert_tokens_to_ids(END_OF_TURN))
    answers = []
    with torch.no_grad():
        for ex in examples:
            inputs = processor(text=[_prompt(processor, ex)], images=[ex.image], return_tensors="pt")
            out = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=eos)
            new = out[0, inputs["input_ids"].shape[1] :]
            answers.append(str(processor.tokenizer.decode(new, skip_special_tokens=True)))
    return answers


def answer_json(answer: dict[str, Any]) -> str:
    """The answer text the model is taught: compact JSON, the only form the engine's grammar lets it write
    (``disable_any_whitespace`` in ``engine.runtime.config``)."""
    return json.dumps(answer, ensure_ascii=False, separators=(",", ":"))

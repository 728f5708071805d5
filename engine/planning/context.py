"""A model's own context length, read from its ``config.json`` the way vLLM derives it.

vLLM (``vllm/config/model.py``, ``_get_and_verify_max_len``) takes the smallest of the length keys of the text config
(``max_position_embeddings`` and its kin), ``model_max_length`` over them when the config has one, the tokenizer's
``model_max_length`` when that is smaller, and multiplies by the RoPE scaling ``factor`` except for the kinds whose
length is scaled already (YaRN, LongRoPE, Llama 3) and Gemma 3's. An engine asked for more refuses to start after a
minute of loading; knowing the figure beforehand lets the worker and the commands default to it and refuse a larger
ask in one line. Pure Python: no transformers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.planning.shapes import read_model_config

# vLLM's order (``derive_max_model_len_and_key``); the smallest present wins.
LENGTH_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_target_positions",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)
# RoPE kinds whose max_position_embeddings is scaled already: vLLM applies no factor to them.
_PRESCALED = {"su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling"}
DEFAULT_WHEN_UNSTATED = 2048  # what vLLM assumes when config.json names no length


@dataclass(frozen=True)
class ModelContext:
    tokens: int
    source: str  # where the figure comes from, for a message: "max_position_embeddings in /m/config.json"


def _text_config(cfg: dict[str, Any]) -> dict[str, Any]:
    for key in ("text_config", "llm_config", "language_config"):
        sub = cfg.get(key)
        if isinstance(sub, dict) and any(k in sub for k in LENGTH_KEYS):
            return sub
    return cfg


def _rope_factor(cfg: dict[str, Any], text: dict[str, Any]) -> float:
    if "gemma3" in str(cfg.get("model_type", "")):
        return 1.0
    rope = text.get("rope_parameters") or text.get("rope_scaling") or cfg.get("rope_scaling")
    if not isinstance(rope, dict):
        return 1.0
    # One set for the model, or one per layer kind ({"full_attention": {...}, "sliding_attention": {...}}).
    sets = [v for v in rope.values() if isinstance(v, dict)] or [rope]
    factor = 1.0
    for rp in sets:
        kind = rp.get("rope_type") or rp.get("type") or "default"
        if kind not in _PRESCALED and isinstance(rp.get("factor"), int | float):
            factor = float(rp["factor"])
    return factor


def model_context(model_dir: Path) -> ModelContext:
    """The longest context ``model_dir``'s engine may be started with (``ModelConfigError`` when config.json is
    missing or unreadable)."""
    read_model_config(model_dir)  # the planner's own checks and messages for a missing or broken config.json
    path = model_dir / "config.json"
    cfg = json.loads(path.read_text(encoding="utf-8"))
    text = _text_config(cfg)
    found = [(int(text[k]), k) for k in LENGTH_KEYS if isinstance(text.get(k), int | float)]
    if isinstance(text.get("model_max_length"), int | float):
        tokens, key = int(text["model_max_length"]), "model_max_length"
    elif found:
        tokens, key = min(found)
    else:
        tokens, key = DEFAULT_WHEN_UNSTATED, "no length key (vLLM assumes 2048)"
    source = f"{key} in {path}"
    tokenizer = model_dir / "tokenizer_config.json"
    if tokenizer.is_file():
        try:
            limit = json.loads(tokenizer.read_text(encoding="utf-8")).get("model_max_length")
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):
            limit = None
        if isinstance(limit, int | float) and limit < tokens:
            tokens, source = int(limit), f"model_max_length in {tokenizer}"
    factor = _rope_factor(cfg, text)
    if factor != 1.0:
        tokens, source = int(tokens * factor), f"{source}, times the RoPE scaling factor {factor:g}"
    return ModelContext(tokens, source)

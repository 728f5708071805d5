"""Prompts rendered by the served model's own chat template (its tokenizer's), never a hard-coded format.

A pipeline says *what* to ask (system text, user text, how many images); the template says how this
model wants it written, image placeholders included. Renders are cached: a batch job asks the same
few prompt shapes millions of times, and the shared system prefix keeps the engine's prefix cache warm.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

from vlbatch.errors import MODEL_CONFIG_INVALID, NO_CHAT_TEMPLATE, VlbatchError

Messages = list[dict[str, Any]]


class ChatTemplateError(VlbatchError):
    """The model directory has no usable chat template (configuration, found at worker start)."""

    code = NO_CHAT_TEMPLATE


def messages(system: str, user: str, n_images: int, n_videos: int = 0) -> Messages:
    """OpenAI-style content parts: the images (or videos) first, then the text that asks about them."""
    content: list[dict[str, Any]] = [{"type": "image"} for _ in range(n_images)]
    content += [{"type": "video"} for _ in range(n_videos)]
    content.append({"type": "text", "text": user})
    return [{"role": "system", "content": system}, {"role": "user", "content": content}]


class ChatTemplate:
    def __init__(self, render: Callable[[Messages], str], *, source: str = "custom") -> None:
        self._render = render
        self.source = source
        self.render = lru_cache(maxsize=4096)(self._render_uncached)

    def _render_uncached(self, system: str, user: str, n_images: int, n_videos: int = 0) -> str:
        return self._render(messages(system, user, n_images, n_videos))

    def render_messages(self, msgs: Messages) -> str:
        """A whole conversation as given (an OpenAI request's messages, image parts as ``{"type": "image"}``)."""
        return self._render(msgs)

    @classmethod
    def from_model_dir(cls, model_dir: str | Path) -> ChatTemplate:
        """The tokenizer's template (``tokenizer_config.json`` or ``chat_template.jinja``), else the processor's."""
        from transformers import AutoProcessor, AutoTokenizer  # lazy: heavy, and only engine hosts need it

        if not (Path(model_dir) / "config.json").is_file():
            raise VlbatchError(
                f"{model_dir} is not a model directory: it has no config.json (a Hugging Face model folder holds "
                "config.json, the weights and the tokenizer); give the folder the model was downloaded or saved to",
                code=MODEL_CONFIG_INVALID,
            )
        model_dir = str(model_dir)
        try:
            holder: Any = AutoTokenizer.from_pretrained(model_dir)
        except Exception as exc:
            raise ChatTemplateError(f"cannot load the tokenizer of {model_dir}: {exc}") from exc
        if not getattr(holder, "chat_template", None):
            try:
                holder = AutoProcessor.from_pretrained(model_dir)
            except Exception:
                holder = None
        if holder is None or not getattr(holder, "chat_template", None):
            raise ChatTemplateError(
                f"{model_dir} has no chat template (tokenizer_config.json 'chat_template' or chat_template.jinja); "
                "add the model's own template"
            )

        def render(msgs: Messages) -> str:
            return str(holder.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True))

        return cls(render, source=model_dir)

    @property
    def supports_images(self) -> bool:
        """False for a text model's template, which writes nothing for an image part."""
        return self.render("s", "u", 1) != self.render("s", "u", 0)

    @property
    def supports_video(self) -> bool:
        """True when the template writes a video placeholder (Qwen-VL's ``<|video_pad|>``) for a video part."""
        return self.render("s", "u", 0, 1) != self.render("s", "u", 0)

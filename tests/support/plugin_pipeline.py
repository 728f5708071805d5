"""A pipeline that lives outside ``pipelines/``: one module, registered with one line by the test that uses it.

It asks two questions of each photo (its main colour, and whether it is bright) and merges the answers,
so it exercises every part of the protocol: options, requests, parsing and merging.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from pipelines.base import ImageBudget, ImagePipeline, ParseError, PromptSpec

COLOURS = ["red", "green", "blue", "black", "white", "grey"]


class ColourOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_visual_tokens: int = Field(16, ge=4, le=1024)


class DominantColour(ImagePipeline):
    name = "dominant_colour"
    version = "7"
    Options = ColourOptions

    def budget(self, opts: ColourOptions) -> ImageBudget:
        return ImageBudget(max_visual_tokens=opts.max_visual_tokens, images_per_prompt=1)

    def requests(self, opts: ColourOptions, n_images: int) -> list[PromptSpec]:
        colour = {
            "type": "object",
            "properties": {"colour": {"type": "string", "enum": COLOURS}},
            "required": ["colour"],
        }
        bright = {"type": "object", "properties": {"bright": {"type": "boolean"}}, "required": ["bright"]}
        return [
            PromptSpec("You name colours.", "Main colour of this photo?", 32, (0,), colour),
            PromptSpec("You judge light.", "Is this photo bright?", 32, (0,), bright),
        ]

    def parse(self, text: str, opts: ColourOptions, *, finish_reason: str | None) -> dict[str, Any]:
        try:
            data = json.loads(text, strict=False)
        except json.JSONDecodeError as exc:
            code = "output_truncated" if finish_reason == "length" else "parse_error"
            raise ParseError(f"not JSON: {exc}", code=code) from exc
        if not isinstance(data, dict):
            raise ParseError(f"not an object: {text[:80]}")
        return data

    def merge(self, outputs: Sequence[dict[str, Any]], opts: ColourOptions) -> dict[str, Any]:
        return {"colour": outputs[0]["colour"], "bright": bool(outputs[1]["bright"])}


PIPELINE = DominantColour()

"""The ``image_tagging`` pipeline: prompt, output JSON schema and parsing for photo tags.

An item is one prompt with 1..N images (a burst tagged together); the answer is JSON constrained by
structured outputs. ``PIPELINE`` is what the registry holds.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from pipelines.base import ImageBudget, ImagePipeline, PromptSpec, Segment, VideoBudget
from pipelines.documents_common import ParseError, plain_string
from pipelines.tagging_language import checks_language, review_language
from preprocessing.photo_context import PROVIDERS
from vlbatch.errors import OUTPUT_TRUNCATED

NAME = "image_tagging"
VERSION = "1"

SYSTEM_PREFIX = "You tag photos for a photo library. Look at the image(s) and answer with JSON only."


class TaggingOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    vocabulary: list[str] | None = Field(
        None, min_length=1, max_length=2000, description="Closed tag list; open vocabulary when omitted."
    )
    language: str = Field(
        "en",
        min_length=2,
        max_length=16,
        description="Language of the tags and caption: an ISO 639-1 code ('de', 'pt-BR') or an English name. For "
        "any but English, an answer in another language is asked for once more, then kept with an "
        "answer_language_mismatch warning.",
    )
    max_tags: int = Field(10, ge=1, le=100)
    caption: bool = False
    images_per_prompt: int = Field(1, ge=1, le=64)
    max_visual_tokens: int = Field(
        256, ge=4, le=16384, description="Visual-token budget per image; images are resized to fit."
    )
    reuse: bool = Field(
        True,
        description="A photo whose bytes match one already answered with the same model revision, pipeline version "
        "and options (this job or an earlier one of the same tenant) takes that answer (reused_from) without engine "
        "time; false asks the engine again.",
    )
    max_tag_chars: int = Field(32, ge=1, le=200)
    max_caption_chars: int = Field(200, ge=1, le=2000)
    photo_gps: bool = Field(
        False, description="Keep each photo's GPS position (from its EXIF) in the result's photo facts."
    )
    context: list[str] | None = Field(
        None,
        max_length=len(PROVIDERS),
        description="Photo facts told to the model in a short block of the prompt: "
        + ", ".join(PROVIDERS)
        + " (place from the GPS position, only with photo_gps; album: the photo's folder below the job's root; "
        "keywords: the ones a person gave it, in its XMP sidecar, embedded XMP or IPTC). "
        "A photo item's prompt only; a burst is told its first photo's.",
    )
    # Video items (one clip per item): which frames, how many, and the clip's whole visual-token budget.
    max_frames: int = Field(8, ge=1, le=256, description="Most frames taken from one video.")
    fps: float = Field(1.0, gt=0, le=30, description="Most frames per second of video taken.")
    frame_selection: Literal["even", "scene"] = Field(
        "even", description="Frames evenly spaced, or keyframes that start a scene."
    )
    scene_threshold: float = Field(0.1, ge=0, le=1, description="Thumbnail change (0-1) that starts a scene.")
    video_visual_tokens: int = Field(
        1024,
        ge=4,
        le=65536,
        description="Visual-token budget of one video: frames x tokens per frame (as the video input, the model "
        "merges each pair of frames into one frame's tokens).",
    )
    frames_per_prompt: int = Field(4, ge=1, le=64, description="Frames per request; each request is a segment.")
    video_input: Literal["auto", "video", "images"] = Field(
        "auto",
        description="How a segment's frames reach the model: as its video input (Qwen2-VL, Qwen2.5-VL, Qwen3-VL), "
        "as images, or auto (video when the served model takes video).",
    )

    @field_validator("context")
    @classmethod
    def _known_facts(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        unknown = [name for name in value if name not in PROVIDERS]
        if unknown:
            raise ValueError(f"unknown context fact(s) {unknown}; known: {', '.join(PROVIDERS)}")
        return [name for name in PROVIDERS if name in value]  # one order: the same facts, the same options hash

    @model_validator(mode="after")
    def _vocab_clean(self) -> TaggingOptions:
        if self.vocabulary is not None:
            cleaned = normalise_tags(self.vocabulary, max_tags=len(self.vocabulary))
            if not cleaned:
                raise ValueError("vocabulary holds no usable tag")
            self.vocabulary = cleaned
        return self


def normalise_tag(tag: str) -> str:
    text = unicodedata.normalize("NFKC", tag).strip().lower()
    return " ".join(text.replace("_", " ").split()).strip(".,;:!?\"'#")


def normalise_tags(tags: list[str], *, max_tags: int) -> list[str]:
    seen: dict[str, None] = {}
    for t in tags:
        n = normalise_tag(t)
        if n and n not in seen:
            seen[n] = None
    return list(seen)[:max_tags]


# Tags and captions are strings without escapes (see ``documents_common.plain_string``), so a character
# costs at most 4 tokens and ``max_output_tokens`` is a true bound.
MAX_TOKENS_PER_CHAR = 4


def output_schema(opts: TaggingOptions) -> dict[str, Any]:
    tag: dict[str, Any] = (
        {"type": "string", "enum": opts.vocabulary} if opts.vocabulary else plain_string(1, opts.max_tag_chars)
    )
    props: dict[str, Any] = {"tags": {"type": "array", "items": tag, "minItems": 1, "maxItems": opts.max_tags}}
    required = ["tags"]
    if opts.caption:
        props["caption"] = plain_string(0, opts.max_caption_chars)
        required.append("caption")
    return {"type": "object", "properties": props, "required": required, "additionalProperties": False}


def max_output_tokens(opts: TaggingOptions) -> int:
    """Upper bound on answer tokens from the schema's bounds (see MAX_TOKENS_PER_CHAR)."""
    longest = max((len(v) for v in opts.vocabulary), default=1) if opts.vocabulary else opts.max_tag_chars
    per_tag = MAX_TOKENS_PER_CHAR * longest + 3  # quotes and the separator
    caption = MAX_TOKENS_PER_CHAR * opts.max_caption_chars + 16 if opts.caption else 0
    return opts.max_tags * per_tag + caption + 16  # braces, the "tags" key, brackets


def user_prompt(opts: TaggingOptions, n_images: int, context: str = "") -> str:
    """The question; ``context`` (``preprocessing.photo_context``'s block) comes before it, apart."""
    what = "this photo" if n_images == 1 else f"these {n_images} photos (one burst, tag them together)"
    vocab = f" Choose only from this list: {', '.join(opts.vocabulary)}." if opts.vocabulary else ""
    cap = " Also give a one-line caption." if opts.caption else ""
    ask = f"Give up to {opts.max_tags} short tags in language '{opts.language}' for {what}.{vocab}{cap}"
    return f"{context}\n\n{ask}" if context else ask


def video_prompt(opts: TaggingOptions, segment: Segment) -> str:
    n = len(segment.frame_times)
    what = "this frame" if n == 1 else f"these {n} frames"
    span = f"{segment.start_s:.1f}s to {segment.end_s:.1f}s"
    vocab = f" Choose only from this list: {', '.join(opts.vocabulary)}." if opts.vocabulary else ""
    cap = " Also give a one-line caption of what happens." if opts.caption else ""
    ask = f"Give up to {opts.max_tags} short tags in language '{opts.language}'"
    return f"{ask} for {what} of a video ({span}).{vocab}{cap}"


class TaggingAnswer(BaseModel):
    tags: list[str]
    caption: str | None = None


def parse_answer(text: str, opts: TaggingOptions, *, finish_reason: str | None = None) -> dict[str, Any]:
    """Validate the model's JSON and normalise it; raises ParseError with the reason."""
    try:
        data = json.loads(text, strict=False)  # structured outputs may leave raw control characters
        answer = TaggingAnswer.model_validate(data)
    except (json.JSONDecodeError, ValidationError) as exc:
        if finish_reason == "length":
            raise ParseError(
                f"answer cut off at max_tokens={max_output_tokens(opts)} before the JSON closed",
                code=OUTPUT_TRUNCATED,
            ) from exc
        raise ParseError(f"model answer is not the expected JSON: {exc}".splitlines()[0]) from exc
    tags = normalise_tags(answer.tags, max_tags=len(answer.tags))
    if opts.vocabulary:  # filter before capping so an off-list tag does not take a slot
        allowed = set(opts.vocabulary)
        tags = [t for t in tags if t in allowed]
    tags = tags[: opts.max_tags]
    out: dict[str, Any] = {"tags": tags}
    if opts.caption:
        out["caption"] = " ".join((answer.caption or "").split())[: opts.max_caption_chars]
    return out


class ImageTagging(ImagePipeline):
    name = NAME
    version = VERSION
    Options = TaggingOptions

    def budget(self, opts: TaggingOptions) -> ImageBudget:
        return ImageBudget(max_visual_tokens=opts.max_visual_tokens, images_per_prompt=opts.images_per_prompt)

    def requests(self, opts: TaggingOptions, n_images: int, context: str = "") -> list[PromptSpec]:
        return [
            PromptSpec(
                system=SYSTEM_PREFIX,
                user=user_prompt(opts, n_images, context),
                max_tokens=max_output_tokens(opts),
                images=tuple(range(n_images)),
                json_schema=output_schema(opts),
            )
        ]

    def parse(self, text: str, opts: TaggingOptions, *, finish_reason: str | None) -> dict[str, Any]:
        return parse_answer(text, opts, finish_reason=finish_reason)

    def reviews(self, opts: TaggingOptions) -> bool:
        return checks_language(opts)

    def review(self, output: dict[str, Any], opts: TaggingOptions, *, last: bool) -> tuple[dict[str, Any], str | None]:
        """The answer's language (``pipelines.tagging_language``): asked once more when it is another one."""
        return review_language(output, opts, last=last)

    takes_video = True

    def video_budget(self, opts: TaggingOptions) -> VideoBudget:
        return VideoBudget(
            max_frames=opts.max_frames,
            fps=opts.fps,
            selection=opts.frame_selection,
            scene_threshold=opts.scene_threshold,
            max_visual_tokens=opts.video_visual_tokens,
            frames_per_prompt=opts.frames_per_prompt,
            video_input=opts.video_input,
        )

    def video_requests(self, opts: TaggingOptions, segments: Sequence[Segment]) -> list[PromptSpec]:
        specs = []
        first = 0
        for seg in segments:
            n = len(seg.frame_times)
            specs.append(
                PromptSpec(
                    system=SYSTEM_PREFIX,
                    user=video_prompt(opts, seg),
                    max_tokens=max_output_tokens(opts),
                    images=tuple(range(first, first + n)),
                    json_schema=output_schema(opts),
                    segment=seg,
                )
            )
            first += n
        return specs

    def merge_video(
        self, outputs: Sequence[dict[str, Any]], segments: Sequence[Segment], opts: TaggingOptions
    ) -> dict[str, Any]:
        """The clip's tags (first seen first), its caption (the first segment's) and each segment's tags."""
        tags = normalise_tags([t for out in outputs for t in out["tags"]], max_tags=opts.max_tags)
        parts = [
            {"start_s": seg.start_s, "end_s": seg.end_s, "frame_times": list(seg.frame_times), **out}
            for seg, out in zip(segments, outputs, strict=True)
        ]
        merged: dict[str, Any] = {"tags": tags, "segments": parts}
        if opts.caption:
            merged["caption"] = next((out["caption"] for out in outputs if out.get("caption")), "")
        return merged


PIPELINE = ImageTagging()

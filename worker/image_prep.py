"""An image item becomes engine requests: load its sources, size each image to the job's visual-token
budget, and render the pipeline's prompts with the model's chat template. Runs in the preprocessing pool.

A video item (one clip) becomes its chosen frames, sized so all of them fit the clip's budget, grouped
into segments: one request per segment. Where the served model has a video input (a video processor and a
chat template that writes a video placeholder: Qwen2-VL, Qwen2.5-VL, Qwen3-VL) a segment's frames go as one
video, ``frames_per_prompt`` frames each, and the model merges every ``temporal_patch_size`` frames into
one frame's tokens, so the budget buys twice the frames or larger ones. Otherwise (or with the job option
``video_input: images``) a segment is at most ``limit_images_per_prompt`` frames sent as images.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.runtime.requests import GenerationRequest
from engine.vision import VideoGeometry, VisionGeometry
from pipelines.base import ImagePipeline, PromptSpec, Segment, VideoBudget
from preprocessing.addresses import AddressPolicy
from preprocessing.fetch import UrlPolicy
from preprocessing.images import budget_pixels, load_source
from preprocessing.input_errors import InputError
from preprocessing.photo_context import Photo, context_block
from preprocessing.video import ClipLimits, FrameSelection, VideoFrames, decode_frames, is_video_source
from vlbatch.db.tenants import Roots
from vlbatch.errors import MODEL_HAS_NO_VISION, NO_IMAGES, TOO_MANY_IMAGES, VIDEO_NOT_SUPPORTED
from vlbatch.settings import Settings
from worker.context import WorkerContext
from worker.image_decode import image_decoder


def url_policy(settings: Settings) -> UrlPolicy:
    """What image URLs may reach beyond public addresses, from ``VLBATCH_URL_ALLOW_*``."""
    addresses = AddressPolicy.of(settings.fetch.url_allow_networks, settings.fetch.url_allow_hosts)
    return UrlPolicy(addresses=addresses, max_redirects=settings.fetch.url_max_redirects)


def load_images(sources: list[str], *, settings: Settings, roots: Roots, limit: int) -> list[bytes]:
    """The item's images' bytes, as read (not decoded) inside ``roots`` (the job's tenant's); ``InputError`` names
    the bad input."""
    if not sources:
        raise InputError(NO_IMAGES, "the item lists no images")
    if len(sources) > limit:
        raise InputError(TOO_MANY_IMAGES, f"{len(sources)} images in one prompt; the limit is {limit}")
    return [
        load_source(
            src,
            allowed_roots=roots.inputs,
            max_bytes=settings.limits.max_input_bytes,
            url_timeout_s=settings.fetch.url_timeout_s,
            url_policy=url_policy(settings),
            allowed_s3_prefixes=roots.s3_prefixes,
        )
        for src in sources
    ]


def photo_facts(images: list[Any], *, keep_gps: bool) -> list[dict[str, Any]]:
    """Each image's facts from its header (``decode_for_budget`` carries them), the GPS position dropped
    unless the job asks for it."""
    facts = []
    for img in images:
        one = dict(img.info.pop("photo", None) or {})
        if not keep_gps:
            one.pop("gps", None)
        facts.append(one)
    return facts


def prepare_images(
    sources: list[str],
    *,
    geometry: VisionGeometry,
    settings: Settings,
    roots: Roots,
    max_visual_tokens: int,
    limit: int,
    data: list[bytes] | None = None,
) -> list[Any]:
    """The item's images, decoded and resized inside the budget; ``InputError`` names the bad input. ``data``:
    the sources' bytes when they are read already (``load_images``)."""
    if data is None:
        data = load_images(sources, settings=settings, roots=roots, limit=limit)
    geo = geometry
    # Never above the model processor's own max_pixels: it would shrink the image again and the token
    # count we budgeted would no longer be the one the engine sees.
    max_px = min(budget_pixels(max_visual_tokens, patch_size=geo.patch_size, merge_size=geo.merge_size), geo.max_pixels)
    min_px = min(max_px, geo.min_pixels)
    decode = image_decoder(settings)  # in this thread, or in a decoder child (VLBATCH_IMAGE_DECODE_ISOLATION)
    images = []
    for src, raw in zip(sources, data, strict=True):
        what = f"image '{src[:200]}'" if not src.startswith("data:") else "an inline image"
        images.append(decode(raw, what=what, factor=geo.factor, min_pixels=min_px, max_pixels=max_px))
    return images


def prepare_video(
    source: str,
    budget: VideoBudget,
    *,
    geometry: VisionGeometry,
    settings: Settings,
    roots: Roots,
    video: VideoGeometry | None = None,
    per_prompt: int | None = None,
) -> VideoFrames:
    """The clip's chosen frames inside the budget, within the settings' time, size and length caps: sized for
    the model's image processor, or with ``video`` for its video processor, as videos of ``per_prompt`` frames."""
    limits = ClipLimits(
        max_bytes=settings.limits.max_video_bytes,
        max_seconds=settings.limits.max_video_seconds,
        max_pixels_guard=settings.limits.max_video_pixels,
        timeout_s=settings.decoding.video_decode_timeout_s,
    )
    return decode_frames(
        source,
        allowed_roots=roots.inputs,
        limits=limits,
        selection=FrameSelection(budget.selection),
        max_frames=budget.max_frames,
        fps=budget.fps,
        scene_threshold=budget.scene_threshold,
        max_visual_tokens=budget.max_visual_tokens,
        **_frame_geometry(budget, geometry, video, per_prompt),
    )


def _frame_geometry(
    budget: VideoBudget, image: VisionGeometry, video: VideoGeometry | None, per_prompt: int | None
) -> dict[str, Any]:
    if video is None:
        geo = image
        return {
            "factor": geo.factor,
            "patch_size": geo.patch_size,
            "merge_size": geo.merge_size,
            "min_pixels": geo.min_pixels,
            "max_pixels": geo.max_pixels,
        }
    per = per_prompt or budget.max_frames
    return {
        "factor": video.factor,
        "patch_size": video.patch_size,
        "merge_size": video.merge_size,
        "min_pixels": video.min_pixels,
        # the processor's per-clip pixel cap is tightest for the longest video: the segment of ``per`` frames
        "max_pixels": video.frame_max_pixels(min(per, budget.max_frames)),
        "temporal_patch_size": video.temporal_patch_size,
        "per_prompt": per,
    }


def video_geometry_for(ctx: WorkerContext, mode: str) -> VideoGeometry | None:
    """The model's video processor when a clip goes as the model's video input (``mode``: the job's
    ``video_input``), None when its frames go as images; ``InputError`` when video is asked of a model
    without one."""
    takes = ctx.video_geometry is not None and ctx.runner.config.limit_videos_per_prompt > 0 and ctx.chat.supports_video
    if mode == "images" or (mode == "auto" and not takes):
        return None
    if not takes:
        raise InputError(
            VIDEO_NOT_SUPPORTED,
            f"video_input 'video': the served model ({ctx.chat.source}) has no video input; use 'images' or 'auto'",
        )
    return ctx.video_geometry


def video_clip(frames: list[Any], times: list[float]) -> tuple[Any, dict[str, Any]]:
    """A segment's frames as the engine's video input: the frames stacked (T x H x W x 3, uint8) and what
    the processor may read of them (the frames are chosen already: it must not sample again)."""
    array = np.stack([np.asarray(f.convert("RGB"), dtype=np.uint8) for f in frames])
    span = max(times[-1] - times[0], 1e-3)
    fps = (len(times) - 1) / span if len(times) > 1 else 1.0
    metadata = {
        "fps": fps,
        "duration": span,
        "total_num_frames": len(times),
        "frames_indices": list(range(len(times))),
        "video_backend": "pyav",
        "do_sample_frames": False,
    }
    return array, metadata


def segments_of(video: VideoFrames, per_prompt: int) -> list[Segment]:
    """Consecutive frames in groups of ``per_prompt``; a segment lasts until the next one starts (the last
    until the clip ends)."""
    times = [f.time_s for f in video.frames]
    groups = [times[i : i + per_prompt] for i in range(0, len(times), per_prompt)]
    starts = [g[0] for g in groups]
    ends = [*starts[1:], max(video.duration_s, times[-1])]
    return [Segment(round(s, 3), round(e, 3), tuple(g)) for s, e, g in zip(starts, ends, groups, strict=True)]


def image_limit(ctx: WorkerContext, pipeline: ImagePipeline, opts: Any) -> int:
    """How many images one item of this job may hold: the pipeline's and the engine's limit."""
    return min(pipeline.budget(opts).images_per_prompt, ctx.runner.config.limit_images_per_prompt)


@dataclass(frozen=True)
class Prepared:
    """An image or video item ready to submit: its requests, its photos' facts (none for a video), and how to ask
    the same requests again with an instruction added to each prompt (a pipeline's ``review``), on the same
    prepared pictures."""

    requests: list[GenerationRequest]
    photos: list[dict[str, Any]]
    again: Callable[[str], list[GenerationRequest]]


def build_requests(
    ctx: WorkerContext,
    pipeline: ImagePipeline,
    opts: Any,
    *,
    item_id: int,
    attempt: int,
    sources: list[str],
    roots: Roots,
    data: list[bytes] | None = None,
) -> Prepared:
    """Everything the engine needs for one item, ready to submit, and its photos' facts (none for a video);
    ``data``: its images' bytes, when read already. A photo item's prompt holds the context its options ask for
    (``preprocessing.photo_context``: the first photo's, told as the pipeline writes it)."""
    if any(is_video_source(src) for src in sources):
        if not pipeline.takes_video or len(sources) != 1:
            why = "a video is an item alone" if pipeline.takes_video else f"pipeline '{pipeline.name}' takes no video"
            raise InputError(VIDEO_NOT_SUPPORTED, f"{why}; the item lists {len(sources)} inputs")
        vbudget = pipeline.video_budget(opts)
        vgeo = video_geometry_for(ctx, vbudget.video_input)
        if vgeo is not None:  # one video per prompt: the segment's frames are one input, not one each
            per_prompt = max(1, vbudget.frames_per_prompt)
        else:
            per_prompt = max(1, min(vbudget.frames_per_prompt, ctx.runner.config.limit_images_per_prompt))
        video = prepare_video(
            sources[0],
            vbudget,
            geometry=ctx.geometry,
            settings=ctx.settings,
            roots=roots,
            video=vgeo,
            per_prompt=per_prompt,
        )
        images = [f.image for f in video.frames]
        specs = pipeline.video_requests(opts, segments_of(video, per_prompt))
        facts: list[dict[str, Any]] = []
        if vgeo is not None:

            def render_video(spec: PromptSpec, user: str) -> str:
                return ctx.chat.render(spec.system, user, 0, 1)

            requests = [
                GenerationRequest(
                    request_id=f"item-{item_id}-{attempt}-{k}",
                    prompt=render_video(spec, spec.user),
                    videos=[
                        video_clip([images[i] for i in spec.images], [video.frames[i].time_s for i in spec.images])
                    ],
                    max_tokens=spec.max_tokens,
                    json_schema=spec.json_schema,
                    segment=spec.segment,
                )
                for k, spec in enumerate(specs)
            ]
            return Prepared(requests, facts, _asker(requests, specs, render_video))
    else:
        images = prepare_images(
            sources,
            geometry=ctx.geometry,
            settings=ctx.settings,
            roots=roots,
            max_visual_tokens=pipeline.budget(opts).max_visual_tokens,
            limit=image_limit(ctx, pipeline, opts),
            data=data,
        )
        facts = photo_facts(images, keep_gps=pipeline.photo_gps(opts))
        asked = pipeline.context_facts(opts)
        block = ""
        if asked and facts:
            photo = Photo(sources[0], facts[0], roots.inputs, ctx.settings.xmp.xmp_keyword_root)
            block = context_block(asked, photo)
        specs = pipeline.requests(opts, len(images), context=block) if block else pipeline.requests(opts, len(images))
    if specs and any(spec.images for spec in specs) and not ctx.chat.supports_images:
        raise InputError(MODEL_HAS_NO_VISION, f"the served model's chat template ({ctx.chat.source}) takes no images")

    def render(spec: PromptSpec, user: str) -> str:
        return ctx.chat.render(spec.system, user, len(spec.images))

    requests = [
        GenerationRequest(
            request_id=f"item-{item_id}-{attempt}-{k}",
            prompt=render(spec, spec.user),
            images=[images[i] for i in spec.images],
            max_tokens=spec.max_tokens,
            json_schema=spec.json_schema,
            segment=spec.segment,
        )
        for k, spec in enumerate(specs)
    ]
    return Prepared(requests, facts, _asker(requests, specs, render))


def _asker(
    requests: list[GenerationRequest], specs: list[PromptSpec], render: Callable[[PromptSpec, str], str]
) -> Callable[[str], list[GenerationRequest]]:
    """The item's requests asked again, each prompt with ``instruction`` after the pipeline's own text."""

    def again(instruction: str) -> list[GenerationRequest]:
        return [
            dataclasses.replace(
                req, request_id=f"{req.request_id}-again", prompt=render(spec, f"{spec.user}\n\n{instruction}")
            )
            for req, spec in zip(requests, specs, strict=True)
        ]

    return again

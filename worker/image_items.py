"""An image item becomes engine requests: load its sources, size each image to the job's visual-token
budget, and render the pipeline's prompts with the model's chat template. Runs in the preprocessing pool.
"""

from __future__ import annotations

from typing import Any

from engine.runtime.requests import GenerationRequest
from engine.vision import VisionGeometry
from pipelines.base import ImagePipeline
from preprocessing.addresses import AddressPolicy
from preprocessing.errors import InputError
from preprocessing.fetch import UrlPolicy
from preprocessing.images import budget_pixels, decode_for_budget, load_source
from vlbatch.errors import MODEL_HAS_NO_VISION, NO_IMAGES, TOO_MANY_IMAGES
from vlbatch.settings import Settings
from worker.context import WorkerContext


def url_policy(settings: Settings) -> UrlPolicy:
    """What image URLs may reach beyond public addresses, from ``VLBATCH_URL_ALLOW_*``."""
    addresses = AddressPolicy.of(settings.url_allow_networks, settings.url_allow_hosts)
    return UrlPolicy(addresses=addresses, max_redirects=settings.url_max_redirects)


def prepare_images(
    sources: list[str],
    *,
    geometry: VisionGeometry,
    settings: Settings,
    max_visual_tokens: int,
    limit: int,
) -> list[Any]:
    """The item's images, decoded and resized inside the budget; ``InputError`` names the bad input."""
    if not sources:
        raise InputError(NO_IMAGES, "the item lists no images")
    if len(sources) > limit:
        raise InputError(TOO_MANY_IMAGES, f"{len(sources)} images in one prompt; the limit is {limit}")
    geo = geometry
    # Never above the model processor's own max_pixels: it would shrink the image again and the token
    # count we budgeted would no longer be the one the engine sees.
    max_px = min(budget_pixels(max_visual_tokens, patch_size=geo.patch_size, merge_size=geo.merge_size), geo.max_pixels)
    min_px = min(max_px, geo.min_pixels)
    images = []
    for src in sources:
        data = load_source(
            src,
            allowed_roots=settings.allowed_input_roots,
            max_bytes=settings.max_input_bytes,
            url_timeout_s=settings.url_timeout_s,
            url_policy=url_policy(settings),
        )
        images.append(decode_for_budget(data, factor=geo.factor, min_pixels=min_px, max_pixels=max_px))
    return images


def build_requests(
    ctx: WorkerContext, pipeline: ImagePipeline, opts: Any, *, item_id: int, attempt: int, sources: list[str]
) -> list[GenerationRequest]:
    """Everything the engine needs for one item, ready to submit."""
    budget = pipeline.budget(opts)
    limit = min(budget.images_per_prompt, ctx.runner.config.limit_images_per_prompt)
    images = prepare_images(
        sources, geometry=ctx.geometry, settings=ctx.settings, max_visual_tokens=budget.max_visual_tokens, limit=limit
    )
    specs = pipeline.requests(opts, len(images))
    if specs and any(spec.images for spec in specs) and not ctx.chat.supports_images:
        raise InputError(MODEL_HAS_NO_VISION, f"the served model's chat template ({ctx.chat.source}) takes no images")
    return [
        GenerationRequest(
            request_id=f"item-{item_id}-{attempt}-{k}",
            prompt=ctx.chat.render(spec.system, spec.user, len(spec.images)),
            images=[images[i] for i in spec.images],
            max_tokens=spec.max_tokens,
            json_schema=spec.json_schema,
        )
        for k, spec in enumerate(specs)
    ]

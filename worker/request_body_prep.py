"""A request item (one OpenAI request body) becomes its engine request: the images it names are loaded and
sized within the job's budget by the same code as image items, the messages are rendered by the model's chat
template (a completions prompt goes as it is). Runs in the preprocessing pool."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from engine.runtime.requests import GenerationRequest
from pipelines.base import RequestPipeline
from preprocessing.input_errors import InputError
from vlbatch.db.tenants import Roots
from vlbatch.errors import INVALID_BATCH_LINE, MODEL_HAS_NO_VISION
from worker.context import WorkerContext
from worker.image_prep import prepare_images


def build_request_item(
    ctx: WorkerContext,
    pipeline: RequestPipeline,
    opts: Any,
    *,
    item_id: int,
    attempt: int,
    body: dict[str, Any],
    roots: Roots,
) -> list[GenerationRequest]:
    try:
        spec = pipeline.request(body, opts)
    except (ValidationError, ValueError) as exc:  # checked when the batch was made; a row edited since is one item's
        raise InputError(INVALID_BATCH_LINE, f"request body refused: {exc}".splitlines()[0]) from exc
    sources = pipeline.sources(body)
    images: list[Any] = []
    if sources:
        if not ctx.chat.supports_images:
            raise InputError(
                MODEL_HAS_NO_VISION, f"the served model's chat template ({ctx.chat.source}) takes no images"
            )
        budget = pipeline.budget(opts)
        images = prepare_images(
            sources,
            geometry=ctx.geometry,
            settings=ctx.settings,
            roots=roots,
            max_visual_tokens=budget.max_visual_tokens,
            limit=min(budget.images_per_prompt, ctx.runner.config.limit_images_per_prompt),
        )
    prompt = spec.prompt if spec.messages is None else ctx.chat.render_messages(list(spec.messages))
    return [
        GenerationRequest(
            request_id=f"item-{item_id}-{attempt}-0",
            prompt=prompt or "",
            images=images,
            max_tokens=spec.max_tokens,
            temperature=spec.temperature,
            json_schema=spec.json_schema,
            top_p=spec.top_p,
            seed=spec.seed,
            stop=spec.stop,
            presence_penalty=spec.presence_penalty,
            frequency_penalty=spec.frequency_penalty,
        )
    ]

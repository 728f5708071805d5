"""Know before you run: what a job would cost, without storing it (a dry run), and whether it meets its deadline.

``estimate`` takes the same ``JobRequest`` a submit takes and answers, each figure with the assumption it rests on:

- the items, and each image item's exact visual tokens: the image's size from its header only (no decode), turned
  upright by its EXIF orientation and resized as the model's processor does (``preprocessing.images.smart_resize``,
  the code the worker sizes images with), under the pipeline's visual-token budget; and its prompt's text tokens
  (the caller's tokenizer of the served model, else about four characters a token, said so);
- the engine time: the items over the measured rate of the workers serving the model (``vlbatch.db.rates``, their
  busy intervals of the last hour), else the planner's estimate for the platform (a ``Planner`` the caller gives:
  the commands have the engine's planner, the API process holds no engine), else unknown. The planner is given
  the answers' budget and, where the model has answered with the same options before, their mean length (an
  answer seldom takes its whole max_tokens, and on a CPU host every output token costs host time);
- the energy: the Wh per item booked to the model's recent jobs, else the planner's card power over the engine
  time; and the cost at ``VLBATCH_PRICE_PER_KWH``;
- the expected finish: now, plus the open items due before it in its queue (earlier deadlines) and its own, at
  the measured rate; a ``deadline`` before it is a warning, or a refusal with ``strict_deadline``.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from PIL import Image
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from jobs.errors import JobRefused
from pipelines import registry
from pipelines.base import ImagePipeline
from preprocessing.images import budget_pixels, smart_resize, upright_size, visual_tokens
from vlbatch.db import job_store, rates
from vlbatch.db.models import Item, ItemStatus, Job, JobStatus
from vlbatch.errors import DEADLINE_UNMEETABLE
from vlbatch.settings import Settings

log = logging.getLogger(__name__)

ORIENTATION_TAG = 0x0112
CHARS_PER_TOKEN = 4  # without the model's tokenizer: the usual rule of thumb for English text
LISTED_ITEMS = 1000  # items listed one by one in an answer; the totals cover all of them


@dataclass(frozen=True)
class Geometry:
    """The served model's vision grid (``engine.vision.VisionGeometry``'s fields), given by a caller that can read
    the model; Qwen2-VL's defaults otherwise."""

    patch_size: int = 14
    merge_size: int = 2
    min_pixels: int = 4 * 28 * 28
    max_pixels: int = 16384 * 28 * 28
    source: str = "Qwen2-VL defaults (14-pixel patches merged 2x2): no model directory read"


@dataclass(frozen=True)
class Profile:
    """One item as the planner needs it: mean tokens of its prompt and its answer's budget, and the answers' mean
    length where the model has answered with these options before (``expected_from`` says over what)."""

    visual_tokens_per_image: int
    images_per_prompt: int
    text_tokens: int
    output_tokens: int
    expected_output_tokens: int | None = None
    expected_from: str = ""


@dataclass(frozen=True)
class PlannerRate:
    items_per_s: float
    power_w: float | None  # the cards' data-sheet power; None when not a checked figure
    assumption: str


Planner = Callable[[Profile], PlannerRate | None]
TextCounter = Callable[[str], int]


@dataclass(frozen=True)
class Figure:
    value: float | None  # None: unknown, and ``assumption`` says why
    assumption: str


@dataclass(frozen=True)
class ItemTokens:
    ref: str | None
    visual_tokens: int | None  # None: not known without fetching or decoding (a URL, a video, a document)
    text_tokens: int
    output_tokens: int  # the answer's budget (max_tokens): the most it can take


@dataclass(frozen=True)
class Estimate:
    items: int
    per_item: list[ItemTokens]  # the first LISTED_ITEMS
    visual_tokens: int
    text_tokens: int
    tokens: str  # how the token counts were made
    engine_seconds: Figure
    wh: Figure
    cost: Figure
    expected_finish: datetime | None
    warnings: list[str] = field(default_factory=list)


def _header_tokens(source: str, geo: Geometry, max_visual_tokens: int) -> int | None:
    """Visual tokens of one image from its header: opening with PIL reads the header, not the pixels."""
    if source.startswith(("http://", "https://")):
        return None
    try:
        if source.startswith("data:"):
            import io

            img = Image.open(io.BytesIO(base64.b64decode(source.split(",", 1)[1])))
        else:
            img = Image.open(Path(source))
        with img:
            orientation = img.getexif().get(ORIENTATION_TAG, 1)
            width, height = upright_size(*img.size, orientation if orientation in range(1, 9) else 1)
    except Exception:  # not an image (a video, a broken file): the worker fails it or treats it as a clip
        return None
    max_px = min(budget_pixels(max_visual_tokens, patch_size=geo.patch_size, merge_size=geo.merge_size), geo.max_pixels)
    min_px = min(max_px, geo.min_pixels)
    try:
        h, w = smart_resize(height, width, factor=geo.patch_size * geo.merge_size, min_pixels=min_px, max_pixels=max_px)
    except Exception:  # an aspect ratio the worker refuses: the item fails there
        return None
    return visual_tokens(h, w, patch_size=geo.patch_size, merge_size=geo.merge_size)


def _tokens(
    request_items: Sequence[Any], pipeline: Any, opts: Any, geo: Geometry, count_text: TextCounter | None
) -> tuple[list[ItemTokens], str]:
    count = count_text or (lambda text: -(-len(text) // CHARS_PER_TOKEN))
    text_how = "text by the model's tokenizer" if count_text else f"text at about {CHARS_PER_TOKEN} characters a token"
    if not isinstance(pipeline, ImagePipeline):
        return [ItemTokens(it.ref, None, 0, 0) for it in request_items], (
            "documents and request lines are not read ahead: their tokens show once they run"
        )
    budget = pipeline.budget(opts)
    out = []
    for it in request_items:
        sources = list(it.inputs.get("images", []))
        per_image = [_header_tokens(src, geo, budget.max_visual_tokens) for src in sources]
        specs = pipeline.requests(opts, len(sources))
        text = sum(count(spec.system + spec.user) for spec in specs)
        answer = sum(spec.max_tokens for spec in specs)
        visual = None if any(t is None for t in per_image) else sum(t or 0 for t in per_image)
        out.append(ItemTokens(it.ref, visual, text, answer))
    how = f"images by their header size resized as the processor does ({geo.source}); {text_how}"
    return out, how


def _ahead(session: Session, *, model: str, priority: str, deadline: datetime | None) -> int:
    """Open items of the queue's jobs claimed before a new job with ``deadline`` (earlier deadlines; every job with
    a deadline when it has none)."""
    stmt = (
        select(func.count())
        .select_from(Item)
        .join(Job, Job.id == Item.job_id)
        .where(
            Job.model == model,
            Job.priority == priority,
            Job.status.in_([JobStatus.QUEUED, JobStatus.RUNNING]),
            Job.deadline.is_not(None),
            Item.status.in_([ItemStatus.QUEUED, ItemStatus.RUNNING]),
        )
    )
    if deadline is not None:
        stmt = stmt.where(Job.deadline <= deadline)
    return int(session.scalar(stmt) or 0)


def _engine_time(
    session: Session, *, model: str, n: int, now: datetime, planner: Planner | None, profile: Profile | None
) -> tuple[Figure, float | None, PlannerRate | None]:
    """The engine time, the measured items/s it rests on (None: none), and the planner's figures when used."""
    rate = rates.measured_rate(session, model=model, now=now)
    if rate is not None:
        seconds = n / rate.items_per_s
        why = (
            f"{rate.items_per_s:.3f} items/s measured by {rate.workers} worker(s) serving '{model}' over "
            f"{rate.items} items in the last hour (their busy intervals), all of them on this job"
        )
        return Figure(seconds, why), rate.items_per_s, None
    planned = planner(profile) if planner is not None and profile is not None else None
    if planned is not None and planned.items_per_s > 0:
        return (
            Figure(n / planned.items_per_s, f"no worker has measured '{model}' yet: {planned.assumption}"),
            None,
            planned,
        )
    why = (
        f"no worker has measured '{model}' in the last hour, and no planner estimate (image jobs only; "
        "`vlbatch tag --dry-run --card CARD` plans for a card)"
    )
    return Figure(None, why), None, None


def estimate(
    session: Session,
    settings: Settings,
    request: Any,
    *,
    now: datetime | None = None,
    geometry: Geometry | None = None,
    count_text: TextCounter | None = None,
    planner: Planner | None = None,
) -> Estimate:
    """The dry run of ``request`` (a ``jobs.submit.JobRequest``): nothing is stored (see the module)."""
    now = now or datetime.now(UTC)
    geo = geometry or Geometry()
    model = request.model or settings.served_model_name or ""
    pipeline = registry.get(request.pipeline)
    opts = pipeline.options(request.options)
    n = request.size
    per_item, how = _tokens(list(request.items), pipeline, opts, geo, count_text)
    visual = sum(t.visual_tokens or 0 for t in per_item)
    text = sum(t.text_tokens for t in per_item)
    profile = None
    if per_item and isinstance(pipeline, ImagePipeline):
        images = sum(len(it.inputs.get("images", [])) for it in request.items) or 1
        answered = rates.mean_answer_tokens(
            session, model=model, options_hash=job_store.options_hash(request.pipeline, request.options)
        )
        profile = Profile(
            visual_tokens_per_image=max(1, visual // images),
            images_per_prompt=max(1, round(images / len(per_item))),
            text_tokens=max(1, text // len(per_item)),
            output_tokens=max(1, sum(t.output_tokens for t in per_item) // len(per_item)),
            expected_output_tokens=max(1, round(answered[0])) if answered else None,
            expected_from=f"the mean of {answered[1]} earlier answers of '{model}' with these options"
            if answered
            else "",
        )
    seconds, items_per_s, planned = _engine_time(session, model=model, n=n, now=now, planner=planner, profile=profile)
    wh = _energy(session, model=model, n=n, seconds=seconds.value, planned=planned)
    cost = _cost(wh, settings.price_per_kwh)
    expected = None
    warnings: list[str] = []
    if items_per_s and seconds.value is not None:
        ahead = _ahead(session, model=model, priority=request.priority, deadline=request.deadline)
        expected = now + timedelta(seconds=seconds.value + ahead / items_per_s)
    elif seconds.value is not None:
        expected = now + timedelta(seconds=seconds.value)
    warnings += _deadline_warnings(request, expected)
    return Estimate(n, per_item[:LISTED_ITEMS], visual, text, how, seconds, wh, cost, expected, warnings)


def _energy(session: Session, *, model: str, n: int, seconds: float | None, planned: PlannerRate | None) -> Figure:
    booked = rates.measured_wh_per_item(session, model=model)
    if booked is not None:
        per_item, over = booked
        return Figure(
            per_item * n, f"{per_item * 1000:.2f} Wh per 1,000 items booked to '{model}''s recent jobs ({over} items)"
        )
    if planned is not None and planned.power_w and seconds is not None:
        return Figure(
            planned.power_w * seconds / 3600,
            f"the cards' data-sheet power ({planned.power_w:.0f} W, a ceiling) over the engine time",
        )
    return Figure(None, "no energy booked to this model's jobs yet, and no card power to assume")


def _cost(wh: Figure, price_per_kwh: float | None) -> Figure:
    if price_per_kwh is None:
        return Figure(None, "no price set (VLBATCH_PRICE_PER_KWH)")
    if wh.value is None:
        return Figure(None, "the energy is unknown")
    return Figure(wh.value / 1000 * price_per_kwh, f"{price_per_kwh} per kWh (VLBATCH_PRICE_PER_KWH)")


def _deadline_warnings(request: Any, expected: datetime | None) -> list[str]:
    deadline = request.deadline
    if deadline is None or expected is None or expected <= deadline:
        return []
    message = (
        f"the estimate finishes at {expected.isoformat(timespec='seconds')}, after the deadline "
        f"{deadline.isoformat(timespec='seconds')}"
    )
    if request.strict_deadline:
        raise JobRefused(DEADLINE_UNMEETABLE, message + "; refused (strict_deadline)")
    return [message]


def deadline_check(session: Session, settings: Settings, request: Any, *, now: datetime | None = None) -> list[str]:
    """A job with a deadline, before it is stored: the warning when the measured rate says it will miss it (refused,
    ``JobRefused(deadline_unmeetable)``, with ``strict_deadline``). Cheap: the item count over the rate, no file
    read. No measured rate: nothing to check against, no warning."""
    if request.deadline is None:
        return []
    now = now or datetime.now(UTC)
    model = request.model or settings.served_model_name or ""
    rate = rates.measured_rate(session, model=model, now=now)
    if rate is None:
        return []
    ahead = _ahead(session, model=model, priority=request.priority, deadline=request.deadline)
    expected = now + timedelta(seconds=(request.size + ahead) / rate.items_per_s)
    return _deadline_warnings(request, expected)

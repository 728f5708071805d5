"""Know before you run: what a job would cost, without storing it (a dry run), and whether it meets its deadline.

``estimate`` takes the same ``JobRequest`` a submit takes and answers, each figure with the assumption it rests on:

- the items, and each image item's exact visual tokens: the image's size from its header only (``jobs.headers``:
  read under the tenant's roots as the worker reads it, never decoded), resized as the model's processor does
  (``preprocessing.images.smart_resize``, the code the worker sizes images with), under the pipeline's
  visual-token budget; and its prompt's text tokens (the caller's tokenizer of the served model, else about four
  characters a token, said so), with the photo's context block where the options ask for one (its facts from the
  EXIF in the header, ``jobs.headers.header_facts``, under the same limits). At most
  ``VLBATCH_DRY_RUN_MAX_FILES`` headers are read, for at most ``VLBATCH_DRY_RUN_MAX_SECONDS``: the images past
  either limit count at the mean of those read, and a warning says how many;
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

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pydantic import BaseModel
from sqlalchemy.orm import Session

from jobs import headers
from jobs.refusals import JobRefused
from jobs.request import JobRequest
from pipelines import registry
from pipelines.base import ImagePipeline, Pipeline
from preprocessing.images import budget_pixels, smart_resize, visual_tokens
from preprocessing.keywords import DEFAULT_MARK
from preprocessing.photo_context import Photo, context_block
from vlbatch.db import deadlines, job_store, rates, tenants
from vlbatch.errors import DEADLINE_UNMEETABLE, DRY_RUN_BUSY
from vlbatch.settings import Settings

log = logging.getLogger(__name__)

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


def _image_tokens(size: tuple[int, int], geo: Geometry, max_visual_tokens: int) -> int | None:
    """Visual tokens of an image of ``size`` as the worker resizes it under the budget; None for an aspect ratio
    the worker refuses (the item fails there)."""
    width, height = size
    max_px = min(budget_pixels(max_visual_tokens, patch_size=geo.patch_size, merge_size=geo.merge_size), geo.max_pixels)
    min_px = min(max_px, geo.min_pixels)
    try:
        h, w = smart_resize(height, width, factor=geo.patch_size * geo.merge_size, min_pixels=min_px, max_pixels=max_px)
    except Exception:
        return None
    return visual_tokens(h, w, patch_size=geo.patch_size, merge_size=geo.merge_size)


@dataclass
class _Reads:
    """The header reads of one dry run, within its limits (``VLBATCH_DRY_RUN_MAX_FILES``, ``..._MAX_SECONDS``):
    how many images there are, how many were read, and the tokens of those whose size is known."""

    roots: Sequence[Path]
    max_files: int
    max_bytes: int
    deadline: float
    mark: str = DEFAULT_MARK  # the root of vlbatch's own keywords, left out of a photo's (``VLBATCH_XMP_KEYWORD_ROOT``)
    images: int = 0
    read: int = 0
    known: int = 0
    known_tokens: int = 0
    skipped: int = 0  # beyond a limit: not read, counted at the mean of the known ones
    facts_read: int = 0  # headers read for their EXIF facts (the option ``context``), under the same limits

    def tokens(self, source: str, geo: Geometry, max_visual_tokens: int) -> int | None:
        self.images += 1
        if self.read >= self.max_files or time.monotonic() > self.deadline:
            self.skipped += 1
            return None
        self.read += 1
        size = headers.header_size(source, roots=self.roots, max_bytes=self.max_bytes)
        tokens = None if size is None else _image_tokens(size, geo, max_visual_tokens)
        if tokens is not None:
            self.known += 1
            self.known_tokens += tokens
        return tokens

    def photo(self, source: str, *, keep_gps: bool) -> Photo:
        """The photo as its prompt context reads it: its header facts (``jobs.headers.header_facts``) and its
        keywords, within the same limits as the sizes: nothing read past them."""
        if self.facts_read >= self.max_files or time.monotonic() > self.deadline:
            return Photo(source, {}, self.roots, self.mark, read_keywords=False)
        self.facts_read += 1
        facts = headers.header_facts(source, roots=self.roots, max_bytes=self.max_bytes)
        if not keep_gps:
            facts.pop("gps", None)
        return Photo(source, facts, self.roots, self.mark)

    def extrapolated(self) -> int:
        """The visual tokens of the images not read, at the mean of those known (none known: 0)."""
        return round(self.skipped * self.known_tokens / self.known) if self.known else 0

    def warning(self) -> str | None:
        if not self.skipped:
            return None
        return (
            f"read the headers of {self.read} of {self.images} images (VLBATCH_DRY_RUN_MAX_FILES, "
            f"VLBATCH_DRY_RUN_MAX_SECONDS); the other {self.skipped} are counted at the mean of those read"
        )


@dataclass
class _Counted:
    """Tokens of a request's items: the first ``LISTED_ITEMS`` one by one, and the totals over all of them."""

    listed: list[ItemTokens]
    items: int
    images: int
    visual: int
    text: int
    output: int
    how: str
    warnings: list[str]


def _tokens(
    request_items: Iterable[job_store.NewItem],
    pipeline: Pipeline,
    opts: BaseModel,
    geo: Geometry,
    count_text: TextCounter | None,
    reads: _Reads,
) -> _Counted:
    count = count_text or (lambda text: -(-len(text) // CHARS_PER_TOKEN))
    text_how = "text by the model's tokenizer" if count_text else f"text at about {CHARS_PER_TOKEN} characters a token"
    if not isinstance(pipeline, ImagePipeline):
        listed, n = [], 0
        for it in request_items:
            if n < LISTED_ITEMS:
                listed.append(ItemTokens(it.ref, None, 0, 0))
            n += 1
        how = "documents and request lines are not read ahead: their tokens show once they run"
        return _Counted(listed, n, 0, 0, 0, 0, how, [])
    budget = pipeline.budget(opts)
    prompts: dict[int, tuple[int, int]] = {}  # images in the prompt -> (text tokens, answer budget): one count each
    asked = pipeline.context_facts(opts)
    blocks: dict[str, int] = {}  # a context block -> its tokens (photos of one album share theirs)
    out = _Counted([], 0, 0, 0, 0, 0, "", [])
    for it in request_items:
        sources = list(it.inputs.get("images", []))
        per_image = [reads.tokens(src, geo, budget.max_visual_tokens) for src in sources]
        if len(sources) not in prompts:
            specs = pipeline.requests(opts, len(sources))
            prompts[len(sources)] = (sum(count(s.system + s.user) for s in specs), sum(s.max_tokens for s in specs))
        text, answer = prompts[len(sources)]
        if asked and sources:
            text += _context_tokens(
                asked, sources[0], reads, keep_gps=pipeline.photo_gps(opts), count=count, blocks=blocks
            )
        visual = None if any(t is None for t in per_image) else sum(t or 0 for t in per_image)
        if out.items < LISTED_ITEMS:
            out.listed.append(ItemTokens(it.ref, visual, text, answer))
        out.items += 1
        out.images += len(sources)
        out.visual += sum(t or 0 for t in per_image)
        out.text += text
        out.output += answer
    out.visual += reads.extrapolated()
    out.how = f"images by their header size resized as the processor does ({geo.source}); {text_how}"
    out.warnings = [w for w in [reads.warning()] if w]
    return out


def _context_tokens(
    asked: Sequence[str], source: str, reads: _Reads, *, keep_gps: bool, count: TextCounter, blocks: dict[str, int]
) -> int:
    """The tokens the photo's context block adds to its prompt (``preprocessing.photo_context``), from the facts
    its header tells (``jobs.headers.header_facts``): the block and the blank line that sets it apart."""
    block = context_block(asked, reads.photo(source, keep_gps=keep_gps))
    if not block:
        return 0
    if block not in blocks:
        if len(blocks) >= LISTED_ITEMS:
            blocks.clear()
        blocks[block] = count(block + "\n\n")
    return blocks[block]


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
    request: JobRequest,
    *,
    now: datetime | None = None,
    geometry: Geometry | None = None,
    count_text: TextCounter | None = None,
    planner: Planner | None = None,
) -> Estimate:
    """The dry run of ``request`` (a ``jobs.submit.JobRequest``): nothing is stored (see the module).

    The image headers are read under the tenant's roots (``vlbatch.db.tenants.roots_of``), within the dry-run
    limits, and with no database connection held: a dry run writes nothing, so the session's transaction is ended
    before the reads and its connection goes back to the pool (a slow disk must not hold one). At most
    ``VLBATCH_DRY_RUN_CONCURRENCY`` dry runs of a tenant run at once (``JobRefused(dry_run_busy)`` beyond)."""
    with dry_run_slot(settings, request.tenant):
        now = now or datetime.now(UTC)
        geo = geometry or Geometry()
        model = request.model or settings.model.served_model_name or ""
        pipeline = registry.get(request.pipeline)
        opts = pipeline.options(request.options)
        n = request.size
        reads = _Reads(
            roots=tenants.roots_of(session, settings, request.tenant).inputs,
            max_files=settings.dry_run.dry_run_max_files,
            max_bytes=settings.dry_run.dry_run_header_bytes,
            deadline=time.monotonic() + settings.dry_run.dry_run_max_seconds,
            mark=settings.xmp.xmp_keyword_root,
        )
        session.rollback()  # nothing was written: the connection goes back to the pool for the reads
        counted = _tokens(request.items, pipeline, opts, geo, count_text, reads)
        return _estimate(session, settings, request, counted, now=now, model=model, n=n, planner=planner)


def _estimate(
    session: Session,
    settings: Settings,
    request: JobRequest,
    counted: _Counted,
    *,
    now: datetime,
    model: str,
    n: int,
    planner: Planner | None,
) -> Estimate:
    profile = None
    if counted.items and counted.images:
        answered = rates.mean_answer_tokens(
            session, model=model, options_hash=job_store.options_hash(request.pipeline, request.options)
        )
        profile = Profile(
            visual_tokens_per_image=max(1, counted.visual // counted.images),
            images_per_prompt=max(1, round(counted.images / counted.items)),
            text_tokens=max(1, counted.text // counted.items),
            output_tokens=max(1, counted.output // counted.items),
            expected_output_tokens=max(1, round(answered[0])) if answered else None,
            expected_from=f"the mean of {answered[1]} earlier answers of '{model}' with these options"
            if answered
            else "",
        )
    seconds, items_per_s, planned = _engine_time(session, model=model, n=n, now=now, planner=planner, profile=profile)
    wh = _energy(session, model=model, n=n, seconds=seconds.value, planned=planned)
    cost = _cost(wh, settings.telemetry.price_per_kwh)
    expected = None
    warnings = list(counted.warnings)
    if items_per_s and seconds.value is not None:
        ahead = deadlines.items_ahead(session, model=model, priority=request.priority, deadline=request.deadline)
        expected = now + timedelta(seconds=seconds.value + ahead / items_per_s)
    elif seconds.value is not None:
        expected = now + timedelta(seconds=seconds.value)
    warnings += _deadline_warnings(request, expected)
    return Estimate(n, counted.listed, counted.visual, counted.text, counted.how, seconds, wh, cost, expected, warnings)


_running: dict[str, int] = {}  # tenant -> its dry runs running in this process
_running_lock = threading.Lock()


@contextmanager
def dry_run_slot(settings: Settings, tenant: str) -> Iterator[None]:
    """One of ``tenant``'s ``VLBATCH_DRY_RUN_CONCURRENCY`` dry-run slots in this process, for the length of the
    block; ``JobRefused(dry_run_busy)`` when all are taken. A dry run reads files and parses batch files in the
    API, outside any job quota: one tenant's many at once would take every thread the routes run in."""
    with _running_lock:
        if _running.get(tenant, 0) >= settings.dry_run.dry_run_concurrency:
            raise JobRefused(
                DRY_RUN_BUSY,
                f"{settings.dry_run.dry_run_concurrency} dry run(s) of this tenant are running already "
                "(VLBATCH_DRY_RUN_CONCURRENCY); retry when one answers",
            )
        _running[tenant] = _running.get(tenant, 0) + 1
    try:
        yield
    finally:
        with _running_lock:
            if _running[tenant] <= 1:
                del _running[tenant]
            else:
                _running[tenant] -= 1


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


def _deadline_warnings(request: JobRequest, expected: datetime | None) -> list[str]:
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


def deadline_check(
    session: Session, settings: Settings, request: JobRequest, *, now: datetime | None = None
) -> list[str]:
    """A job with a deadline, before it is stored: the warning when the measured rate says it will miss it (refused,
    ``JobRefused(deadline_unmeetable)``, with ``strict_deadline``). Cheap: the item count over the rate, no file
    read. No measured rate: nothing to check against, no warning."""
    if request.deadline is None:
        return []
    now = now or datetime.now(UTC)
    model = request.model or settings.model.served_model_name or ""
    rate = rates.measured_rate(session, model=model, now=now)
    if rate is None:
        return []
    ahead = deadlines.items_ahead(session, model=model, priority=request.priority, deadline=request.deadline)
    expected = now + timedelta(seconds=(request.size + ahead) / rate.items_per_s)
    return _deadline_warnings(request, expected)

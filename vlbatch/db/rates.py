"""What the workers serving a model measured: their items/s and output tokens/s (``engine_samples``), the
energy booked per item to the model's recent jobs (``jobs.energy_wh``) and the length of its answers
(``results.completion_tokens``), for dry-run estimates. Keyword-only arguments; no HTTP errors."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import pairwise

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from vlbatch.db.models import EngineSample, Item, ItemStatus, Job, Result

# Samples older than this say little about the workers now serving the model.
RATE_WINDOW = timedelta(hours=1)
RECENT_JOBS = 20
RECENT_ANSWERS = 1000


@dataclass(frozen=True)
class MeasuredRate:
    """The model's workers together (they run side by side), over their samples in the window."""

    items_per_s: float
    output_tokens_per_s: float
    workers: int
    items: int  # items the rate was measured over


def measured_rate(
    session: Session, *, model: str, now: datetime, window: timedelta = RATE_WINDOW
) -> MeasuredRate | None:
    """The summed rate of the workers that sampled ``model`` in the window, each over its busy intervals only (an
    idle worker is not a slow one); None when none finished an item.

    An interval is busy when the engine stepped in it or items finished: items finish in bursts (a batch of long
    answers ends together), so the intervals between bursts, in which the engine works on them, count too."""
    rows = session.execute(
        select(
            EngineSample.worker,
            EngineSample.sampled_at,
            EngineSample.steps,
            EngineSample.items_done,
            EngineSample.output_tokens,
        )
        .where(EngineSample.model == model, EngineSample.sampled_at >= now - window)
        .order_by(EngineSample.worker, EngineSample.sampled_at)
    ).all()
    busy: dict[str, list[float]] = {}  # worker -> [seconds, items, tokens]
    for prev, cur in pairwise(rows):
        if prev.worker != cur.worker or (cur.items_done <= prev.items_done and cur.steps <= prev.steps):
            continue
        acc = busy.setdefault(cur.worker, [0.0, 0.0, 0.0])
        acc[0] += (cur.sampled_at - prev.sampled_at).total_seconds()
        acc[1] += cur.items_done - prev.items_done
        acc[2] += cur.output_tokens - prev.output_tokens
    busy = {w: acc for w, acc in busy.items() if acc[0] > 0 and acc[1] > 0}
    if not busy:
        return None
    return MeasuredRate(
        items_per_s=sum(items / seconds for seconds, items, _ in busy.values()),
        output_tokens_per_s=sum(tokens / seconds for seconds, _, tokens in busy.values()),
        workers=len(busy),
        items=int(sum(items for _, items, _ in busy.values())),
    )


def measured_wh_per_item(session: Session, *, model: str) -> tuple[float, int] | None:
    """Watt-hours per finished item over the model's ``RECENT_JOBS`` newest jobs with booked energy, and the
    items that is over; None when no job of the model has energy booked."""
    recent = (
        select(Job.id, Job.energy_wh)
        .where(Job.model == model, Job.energy_wh.is_not(None))
        .order_by(Job.created_at.desc())
        .limit(RECENT_JOBS)
        .subquery()
    )
    wh = session.scalar(select(func.sum(recent.c.energy_wh)))
    done = session.scalar(
        select(func.count())
        .select_from(Item)
        .where(Item.job_id.in_(select(recent.c.id)), Item.status.in_([ItemStatus.SUCCEEDED, ItemStatus.FAILED]))
    )
    if not wh or not done:
        return None
    return float(wh) / int(done), int(done)


def mean_answer_tokens(session: Session, *, model: str, options_hash: str) -> tuple[float, int] | None:
    """Mean output tokens of the model's own answers (not reused ones) in its ``RECENT_JOBS`` newest jobs with these
    options (``job_store.options_hash``), over at most ``RECENT_ANSWERS`` of them, and how many; None when it has
    none. Read through the jobs (indexed results per job), so a huge earlier job is not scanned whole."""
    recent = (
        select(Job.id)
        .where(Job.model == model, Job.options_hash == options_hash)
        .order_by(Job.created_at.desc())
        .limit(RECENT_JOBS)
    )
    answers = (
        select(Result.completion_tokens.label("tokens"))
        .where(Result.job_id.in_(recent), Result.reused_from.is_(None), Result.completion_tokens > 0)
        .limit(RECENT_ANSWERS)
        .subquery()
    )
    mean, n = session.execute(select(func.avg(answers.c.tokens), func.count()).select_from(answers)).one()
    if not n:
        return None
    return float(mean), int(n)

"""Energy booked to jobs: one atomic add per job and interval, and the figures a job's status shows."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sqlalchemy import func, update
from sqlalchemy.orm import Session

from vlbatch.db.models import Job


def add_job_energy(session: Session, *, wh: Mapping[str, float], unmetered_tokens: Mapping[str, int]) -> None:
    """Add each job's watt-hours and unmetered tokens (an UPDATE ... SET x = x + n: workers book concurrently)."""
    for job_id, value in wh.items():
        session.execute(update(Job).where(Job.id == job_id).values(energy_wh=func.coalesce(Job.energy_wh, 0.0) + value))
    for job_id, tokens in unmetered_tokens.items():
        session.execute(
            update(Job).where(Job.id == job_id).values(energy_unmetered_tokens=Job.energy_unmetered_tokens + tokens)
        )


@dataclass(frozen=True)
class JobEnergy:
    """What a job's power cost so far; ``None`` figures are unknown (no metered interval), never zero."""

    wh: float | None
    wh_per_1000_items: float | None
    cost: float | None
    unmetered_tokens: int


def job_energy(job: Job, *, items_done: int, price_per_kwh: float | None) -> JobEnergy:
    wh = job.energy_wh
    per_1000 = wh / items_done * 1000 if wh is not None and items_done else None
    cost = wh / 1000 * price_per_kwh if wh is not None and price_per_kwh is not None else None
    return JobEnergy(wh, per_1000, cost, job.energy_unmetered_tokens or 0)


def describe(energy: JobEnergy, *, items_done: int) -> str:
    """One line for the CLI: the job's Wh, Wh per 1,000 items and cost, or why they are unknown."""
    if energy.wh is None:
        n = energy.unmetered_tokens
        why = f"{n} tokens ran with no power reading" if n else "none booked"
        return f"energy: unknown ({why})"
    parts = [f"energy: {energy.wh:.3f} Wh over {items_done} items"]
    if energy.wh_per_1000_items is not None:
        parts.append(f"{energy.wh_per_1000_items:.2f} Wh per 1,000 items")
    if energy.cost is not None:
        parts.append(f"cost {energy.cost:.4f} at the configured price per kWh")
    if energy.unmetered_tokens:
        parts.append(f"{energy.unmetered_tokens} tokens unmetered")
    return ", ".join(parts)

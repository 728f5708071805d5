"""A job's progress over time as a small inline SVG: items done against time, from a sample of its items.

Every k-th item by seq (k = total / ``SAMPLE``) gives its finish time; sorted, they draw the cumulative count,
so the page reads at most ``SAMPLE`` timestamps whatever the job's size. The slope is the throughput; a flat
stretch is a stall (a paused job, a worker gone).
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy.orm import Session

from vlbatch.db import dashboard

__all__ = ["SAMPLE", "progress_svg"]

SAMPLE = 2000
WIDTH, HEIGHT = 640, 160


def _aware(at: datetime) -> datetime:
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)  # SQLite hands back naive UTC


def _finish_times(session: Session, job_id: str, total: int) -> tuple[list[datetime], int]:
    step = max(1, total // SAMPLE)
    return sorted(_aware(t) for t in dashboard.finish_times(session, job_id=job_id, step=step)), step


def progress_svg(session: Session, *, job_id: str, total: int, started_at: datetime | None) -> str | None:
    """The chart's SVG markup, or None before two items have finished."""
    times, step = _finish_times(session, job_id, total)
    if len(times) < 2:
        return None
    start = _aware(started_at) if started_at is not None else None
    t0 = start if start is not None and start <= times[0] else times[0]
    span = max((times[-1] - t0).total_seconds(), 1e-6)
    points = [(0.0, 0.0)] + [((t - t0).total_seconds(), float((i + 1) * step)) for i, t in enumerate(times)]
    top = max(float(total), points[-1][1])
    coords = " ".join(f"{WIDTH * x / span:.1f},{HEIGHT - HEIGHT * y / top:.1f}" for x, y in points)
    rate = points[-1][1] / span
    return (
        f'<svg id="progress-chart" viewBox="0 0 {WIDTH} {HEIGHT + 20}" width="{WIDTH}" height="{HEIGHT + 20}"'
        ' role="img" aria-label="items done over time">'
        f'<rect x="0" y="0" width="{WIDTH}" height="{HEIGHT}" fill="#fff" stroke="#e3e5e8"/>'
        f'<polyline fill="none" stroke="#2f7d32" stroke-width="2" points="{coords}"/>'
        f'<text x="4" y="{HEIGHT + 15}" font-size="12">0 s</text>'
        f'<text x="{WIDTH - 4}" y="{HEIGHT + 15}" font-size="12" text-anchor="end">{span:.0f} s ·'
        f" {rate:.2f} items/s overall</text>"
        "</svg>"
    )

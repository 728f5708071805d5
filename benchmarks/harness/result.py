"""What one arm measured, and the signature every arm function has."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, TypedDict

from benchmarks.harness.spec import BenchSpec

# (seconds since the timed start, items finished so far, requests running in the engine or None)
Sample = tuple[float, int, float | None]


@dataclass
class ArmResult:
    """One arm's timed run (warm-up and engine load excluded).

    ``mean_occupancy`` is the mean number of running requests per engine step (None when the arm
    cannot see the engine's steps); ``prep_ms_per_image`` the mean CPU time of loading, decoding and
    resizing one image (and encoding it, for an HTTP client), on the clock of the thread that does it,
    so threads waiting for a core do not inflate it; ``db_ms_per_item`` the result writes' and chunk finishes' SQL
    time per item (wall, from the writer's thread); ``db_cpu_ms_per_item`` the CPU those same spans took on their
    own threads' clocks (the service's own cost per item, without the waits on the database);
    ``claim_ms_per_item`` and ``claim_cpu_ms_per_item`` the same of the claims (wall from the claiming threads),
    per item written.
    ``error`` is set when the arm could not run at all (then the figures are zero).
    """

    name: str
    items: int
    failed: int
    seconds: float
    output_tokens: int
    prompt_tokens: int
    mean_occupancy: float | None
    max_num_seqs: int
    prep_ms_per_image: float | None
    db_ms_per_item: float | None
    timeline: list[Sample] = field(default_factory=list)
    images: int | None = None  # photos in the timed items (items * images_per_prompt); None: same as items
    error: str | None = None
    notes: str = ""
    db_cpu_ms_per_item: float | None = None
    claim_ms_per_item: float | None = None
    claim_cpu_ms_per_item: float | None = None

    @property
    def items_per_s(self) -> float:
        return self.items / self.seconds if self.seconds > 0 else 0.0

    @property
    def images_per_s(self) -> float:
        n = self.images if self.images is not None else self.items
        return n / self.seconds if self.seconds > 0 else 0.0

    @property
    def steady_occupancy(self) -> float | None:
        """Mean running requests while 10-90% of the items were done: the full engine, ramp and drain left out."""
        return steady_running(self.timeline, self.items)

    @property
    def output_tokens_per_s(self) -> float:
        return self.output_tokens / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["timeline"] = [list(s) for s in self.timeline]
        d["items_per_s"] = self.items_per_s
        d["images_per_s"] = self.images_per_s
        d["output_tokens_per_s"] = self.output_tokens_per_s
        d["steady_occupancy"] = self.steady_occupancy
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ArmResult:
        names = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        kw["timeline"] = [(float(t), int(n), None if r is None else float(r)) for t, n, r in d.get("timeline", [])]
        return cls(**kw)

    @classmethod
    def failure(cls, name: str, error: str, *, max_num_seqs: int = 0) -> ArmResult:
        return cls(
            name=name,
            items=0,
            failed=0,
            seconds=0.0,
            output_tokens=0,
            prompt_tokens=0,
            mean_occupancy=None,
            max_num_seqs=max_num_seqs,
            prep_ms_per_image=None,
            db_ms_per_item=None,
            error=error,
        )


# An arm: (spec, model directory, photos) -> result. ``photos`` holds the spec's warm-up photos first,
# then the timed ones (``inputs.split_warmup``); the two sets live in different folders, so an arm that
# takes a directory (a job) can run the warm-up folder, then the timed one.
ArmFn = Callable[[BenchSpec, Path, list[Path]], ArmResult]


class DbFigures(TypedDict):
    db_ms_per_item: float | None
    db_cpu_ms_per_item: float | None
    claim_ms_per_item: float | None
    claim_cpu_ms_per_item: float | None


def db_figures(written: int, *, db_s: float, db_cpu_s: float, claim_s: float, claim_cpu_s: float) -> DbFigures:
    """An arm's DB figures (``ArmResult``'s ``db_*`` and ``claim_*`` fields, ms per item) from the seconds a worker's
    counters (``worker.samples.FeederStats``) took over ``written`` items; all None when none was written."""

    def ms(seconds: float) -> float | None:
        return 1000 * seconds / written if written else None

    return {
        "db_ms_per_item": ms(db_s),
        "db_cpu_ms_per_item": ms(db_cpu_s),
        "claim_ms_per_item": ms(claim_s),
        "claim_cpu_ms_per_item": ms(claim_cpu_s),
    }


def mean_running(timeline: list[Sample]) -> float | None:
    """Time-weighted mean of the ``running`` samples of a timeline (None when it has none)."""
    pts = [(t, r) for t, _, r in timeline if r is not None]
    if not pts:
        return None
    if len(pts) == 1 or pts[-1][0] <= pts[0][0]:
        return sum(r for _, r in pts) / len(pts)
    area = sum(r0 * (t1 - t0) for (t0, r0), (t1, _) in itertools.pairwise(pts))
    return area / (pts[-1][0] - pts[0][0])


STEADY_FROM, STEADY_TO = 0.1, 0.9


def steady_running(timeline: list[Sample], items: int) -> float | None:
    """Mean of the ``running`` samples taken while between 10% and 90% of ``items`` were finished.

    A sample's ``running`` covers the interval that ends at it, so a sample counts when the items done at
    the start of its interval (the previous sample's count) reach 10% and its own count is at most 90%: the
    ramp-up before the engine fills and the drain after the last claims stay out. None without such samples.
    """
    if items <= 0:
        return None
    lo, hi = STEADY_FROM * items, STEADY_TO * items
    picked = [r for (_, n0, _), (_, n1, r) in itertools.pairwise(timeline) if r is not None and n0 >= lo and n1 <= hi]
    return sum(picked) / len(picked) if picked else None

"""Several rounds of the same arms, and the round each arm's figure is taken from.

Why: on a small shared host one run of an arm varies by several percent (other processes, the page cache,
the engine's own warm-up), so one round cannot tell 0.95 from 1.01. ``vlbatch bench --rounds N`` runs the
arms N times, interleaved (raw, embedded, service, raw, ...) so drifting load hits every arm alike, and
reports each arm's median round; the JSON keeps every round's items/s, ratios and DB ms/item (an arm that writes
results: a target on the DB's cost holds in every round, not only in the median one).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from benchmarks.harness.report import ratios
from benchmarks.harness.result import ArmResult


def by_round(results: Sequence[ArmResult], rounds: int) -> list[list[ArmResult]]:
    """``results`` (round after round, the same arms in the same order each time) split into rounds."""
    if rounds < 1 or len(results) % rounds:
        raise ValueError(f"{len(results)} results do not split into {rounds} rounds of the same arms")
    per = len(results) // rounds
    return [list(results[i * per : (i + 1) * per]) for i in range(rounds)]


def median_results(results: Sequence[ArmResult]) -> list[ArmResult]:
    """For each arm (first-seen order) the result whose items/s is the median of its rounds (the lower of the
    middle two for an even count); failed rounds count only when every round failed."""
    names = list(dict.fromkeys(r.name for r in results))
    out: list[ArmResult] = []
    for name in names:
        runs = [r for r in results if r.name == name]
        ok = sorted((r for r in runs if r.error is None), key=lambda r: r.items_per_s)
        out.append(ok[(len(ok) - 1) // 2] if ok else runs[0])
    return out


def rounds_json(results: Sequence[ArmResult], rounds: int) -> dict[str, Any]:
    """``rounds.<arm>``: items/s of every round (None for a failed one); ``ratios_by_round``: each round's ratios;
    ``db_ms_by_round.<arm>``: the DB's wall and CPU ms per item of every round, for the arms that write results."""
    split = by_round(results, rounds)
    writers = {r.name for r in results if r.db_ms_per_item is not None}  # decided per arm: a failed round has none
    per_arm: dict[str, list[float | None]] = {}
    db: dict[str, list[dict[str, float | None] | None]] = {}
    for one in split:
        for r in one:
            per_arm.setdefault(r.name, []).append(None if r.error else r.items_per_s)
            if r.name in writers:
                db.setdefault(r.name, []).append(
                    None
                    if r.error
                    else {
                        "wall": r.db_ms_per_item,
                        "cpu": r.db_cpu_ms_per_item,
                        "claim_wall": r.claim_ms_per_item,
                        "claim_cpu": r.claim_cpu_ms_per_item,
                    }
                )
    return {"rounds": per_arm, "ratios_by_round": [ratios(one) for one in split], "db_ms_by_round": db}


def format_rounds(results: Sequence[ArmResult], rounds: int) -> str:
    """One line per arm with its items/s in each round, and each round's ratios to raw."""
    split = by_round(results, rounds)
    lines = [f"items/s in each of {rounds} rounds (the table shows each arm's median round):"]
    figures = rounds_json(results, rounds)
    for name, values in figures["rounds"].items():
        cells = ", ".join("failed" if v is None else f"{v:.2f}" for v in values)
        lines.append(f"  {name:<11} {cells}")
    for name, cells in figures["db_ms_by_round"].items():
        lines.append(f"  {name:<11} DB ms/item, wall / CPU (claims' wall): " + ", ".join(map(_db_cell, cells)))
    for i, one in enumerate(split, 1):
        rat = {k: v for k, v in ratios(one).items() if v is not None}
        if rat:
            lines.append(f"  round {i} ratios: " + ", ".join(f"{k} = {v:.2f}" for k, v in rat.items()))
    return "\n".join(lines)


def _db_cell(cell: dict[str, float | None] | None) -> str:
    if cell is None:
        return "failed"
    figures = ["-" if v is None else f"{v:.2f}" for v in (cell["wall"], cell["cpu"], cell["claim_wall"])]
    return f"{figures[0]} / {figures[1]} ({figures[2]})"

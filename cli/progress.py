"""The progress bar of a long command (done/total, rate, ETA), and an embedded run shown with it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from worker.embedded import EmbeddedRun


def run_embedded(
    run: Callable[[Callable[[int], None], Callable[[int], None]], EmbeddedRun], *, unit: str
) -> EmbeddedRun:
    """Run an embedded job with a progress bar (done/total, items/s, ETA) that starts once the engine is loaded;
    until then a line says the engine is loading (about a minute on a CPU host)."""
    with progress(unit, waiting=LOADING) as (start, advance):
        return run(start, advance)


LOADING = "loading the engine (about a minute on a CPU host)"


def mean_rate(completed: float, elapsed: float | None) -> str:
    """Items a second since the bar started: the figure a run's summary prints (done over the run's time), not
    Rich's rate over its last 30 s, which reads several times the summary's when answers come in bursts."""
    return f"{completed / elapsed:.2f}" if elapsed and completed else "-"


@contextmanager
def progress(unit: str, *, waiting: str | None = None) -> Iterator[tuple[Callable[[int], None], Callable[[int], None]]]:
    """A Rich progress bar for a long command: ``start(total)`` shows it, ``advance(n)`` moves it. ``waiting``, when
    given, is shown (with the time it has taken) until ``start``, where the bar replaces it."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TaskID,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    rate = TextColumn(f"{{task.fields[rate]}} {unit}s/s")
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        rate,
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    ) as progress:
        task: TaskID | None = None
        wait = progress.add_task(waiting, total=None, rate="-") if waiting else None

        def start(total: int) -> None:
            nonlocal task, wait
            if wait is not None:
                progress.remove_task(wait)
                wait = None
            task = progress.add_task("", total=total, rate="-")

        def advance(n: int) -> None:
            if task is not None:
                progress.advance(task, n)
                t = next(t for t in progress.tasks if t.id == task)
                progress.update(task, rate=mean_rate(t.completed, t.elapsed))

        yield start, advance

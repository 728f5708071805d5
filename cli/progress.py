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
    """Run an embedded job with a progress bar (done/total, items/s, ETA) that starts once the engine is loaded."""
    with progress(unit) as (start, advance):
        return run(start, advance)


@contextmanager
def progress(unit: str) -> Iterator[tuple[Callable[[int], None], Callable[[int], None]]]:
    """A Rich progress bar for a long command: ``start(total)`` shows it, ``advance(n)`` moves it."""
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
    with Progress(BarColumn(), MofNCompleteColumn(), rate, TimeElapsedColumn(), TimeRemainingColumn()) as progress:
        task: TaskID | None = None

        def start(total: int) -> None:
            nonlocal task
            task = progress.add_task(unit, total=total, rate="-")

        def advance(n: int) -> None:
            if task is not None:
                progress.advance(task, n)
                speed = progress.tasks[task].speed
                progress.update(task, rate=f"{speed:.2f}" if speed else "-")

        yield start, advance

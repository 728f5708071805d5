"""The progress bar the long commands share (``cli.progress``): a line while the engine loads, then the bar, whose
rate is the run's own (done over the time since the bar started, as the summary prints it), not Rich's recent one."""

from __future__ import annotations

import pytest
from rich.progress import Progress

from cli.progress import LOADING, mean_rate, progress


def test_the_rate_is_done_over_the_time_since_the_bar_started() -> None:
    assert mean_rate(48, 7.2) == "6.67"
    assert mean_rate(0, 3.0) == "-" and mean_rate(5, None) == "-" and mean_rate(5, 0.0) == "-"


def test_the_loading_line_shows_until_the_bar_starts_and_is_gone_after(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []
    original = Progress.remove_task

    def watch(self: Progress, task_id: int) -> None:
        seen.append([str(t.description) for t in self.tasks])
        original(self, task_id)

    monkeypatch.setattr(Progress, "remove_task", watch)
    with progress("item", waiting=LOADING) as (start, advance):
        start(4)
        advance(2)
        start(3)  # eval's second side: a second bar, the loading line already gone
    assert seen == [[LOADING]]


def test_the_bar_ends_with_the_runs_rate(capsys: pytest.CaptureFixture[str]) -> None:
    with progress("item", waiting=LOADING) as (start, advance):
        start(3)
        advance(3)
    out = capsys.readouterr().out
    assert "3/3" in out and "items/s" in out and LOADING not in out

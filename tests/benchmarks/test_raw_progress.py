"""The raw arm's progress recorder under a command's quiet mode: ``vlbatch bench`` sets ``TQDM_DISABLE``, which
makes every tqdm bar disabled by default; the recorder must still count (vLLM's ``LLM.generate`` divides by its
elapsed time, which a disabled bar leaves at 0, and the arm failed with ZeroDivisionError)."""

from __future__ import annotations

import time

from benchmarks.harness.raw import _progress_recorder


def test_the_recorder_counts_even_where_bars_are_disabled_by_default() -> None:
    timeline: list[tuple[float, int, None]] = []
    recorder = _progress_recorder(time.perf_counter(), timeline)  # type: ignore[arg-type]
    bar = recorder(total=3, disable=True)  # what TQDM_DISABLE=1 makes every bar's default
    time.sleep(0.01)
    bar.update(1)
    bar.update(1)
    assert bar.n == 2 and bar.format_dict["elapsed"] > 0
    assert [n for _, n, _ in timeline] == [1, 2]

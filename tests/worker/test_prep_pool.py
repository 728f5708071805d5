"""The preprocessing pool's threads run below the worker's CPU priority, and a niceness of 0 leaves them alone."""

from __future__ import annotations

import os
import sys
import threading

import pytest

from worker.prep_pool import MAX_NICE, lower_this_thread, make_prep_pool

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread niceness is Linux only")


def _niceness() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def test_pool_threads_are_niced_and_the_caller_is_not() -> None:
    base = _niceness()
    with make_prep_pool(2, nice=5) as pool:
        seen = {pool.submit(_niceness).result() for _ in range(8)}
    assert seen == {min(MAX_NICE, base + 5)}
    assert _niceness() == base  # only the pool's own threads moved


def test_zero_keeps_the_worker_priority_and_the_cap_holds() -> None:
    base = _niceness()
    with make_prep_pool(1, nice=0) as pool:
        assert pool.submit(_niceness).result() == base
    box: list[int | None] = []
    t = threading.Thread(target=lambda: box.append(lower_this_thread(100)))
    t.start()
    t.join()
    assert box == [MAX_NICE]

"""The preprocessing pool: threads that decode and resize images, at a lower CPU priority than the engine's.

Why the lower priority: preprocessing only has to stay ahead of the engine, and the engine and its frontend
(prompt processing, output handling) are what set the pace. On a host where the engine computes on the CPU
(vLLM's CPU build) they share the same cores, and a decoding thread that preempts one of the engine's
OpenMP threads stalls the whole step; at ``VLBATCH_PREPROCESS_NICE`` 10 the decoders take the cores the
engine leaves idle (``vlbatch bench``, tiny model on 2 cores: the embedded and service paths went from about
0.95 of raw ``LLM.generate`` to 1.00-1.05). On an accelerator host the CPU is mostly idle and the niceness
costs nothing. Linux only (a thread's niceness is its own there); elsewhere the pool runs at the worker's
priority.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

log = logging.getLogger(__name__)

MAX_NICE = 19


def lower_this_thread(by: int) -> int | None:
    """Raise the calling thread's niceness by ``by`` (capped at 19); returns the new niceness, or None when
    this platform cannot set one thread's priority or refuses to."""
    if by <= 0 or not sys.platform.startswith("linux"):
        return None
    tid = threading.get_native_id()
    try:
        nice = min(MAX_NICE, os.getpriority(os.PRIO_PROCESS, tid) + by)
        os.setpriority(os.PRIO_PROCESS, tid, nice)
    except OSError as exc:  # e.g. a sandbox without setpriority: run at the worker's priority
        log.warning("preprocessing thread keeps the worker's priority: %s", exc)
        return None
    return nice


def make_prep_pool(threads: int, *, nice: int) -> ThreadPoolExecutor:
    """``threads`` preprocessing threads, each ``nice`` steps below the worker's priority."""
    return ThreadPoolExecutor(
        max_workers=threads, thread_name_prefix="prep", initializer=lower_this_thread, initargs=(nice,)
    )

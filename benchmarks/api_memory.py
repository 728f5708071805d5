"""What a ``vlbatch api`` process holds: its resident memory now and at its peak, read from ``/proc`` (Linux), for
the benchmarks that load an API subprocess (``dry_run_memory``, ``batch_memory``)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

MIB = 1024 * 1024


def _status_kib(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/{pid}/status")


def rss_mib(pid: int) -> float:
    """Resident memory of ``pid`` now."""
    return _status_kib(pid, "VmRSS") / 1024


@dataclass
class Peak:
    before_mib: float
    peak_mib: float = 0.0


@contextmanager
def peak_rss(pid: int, *, every_s: float = 0.02) -> Iterator[Peak]:
    """The most resident memory ``pid`` held during the block, sampled every ``every_s`` (``VmHWM`` cannot be
    reset without privileges, and it would count the process's start)."""
    peak = Peak(rss_mib(pid))
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak.peak_mib = max(peak.peak_mib, rss_mib(pid))
            done.wait(every_s)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    try:
        yield peak
    finally:
        done.set()
        t.join()
        peak.peak_mib = max(peak.peak_mib, rss_mib(pid))

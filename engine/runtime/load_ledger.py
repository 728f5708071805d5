"""Where a process's engine loads are counted: one line per load in a file several processes may share.

A vLLM engine load is the most expensive thing vlbatch does outside a job (about a minute on a small CPU host,
several on a loaded one). The test suite names one ledger for its whole run (``VLBATCH_ENGINE_LOAD_LEDGER``), and
every runner it starts, in the test process or in a command it runs, appends a line here before it loads; the run
then reports the count and a budget test holds it. A line is appended with one ``write`` on a file opened for
appending, so lines from concurrent processes never interleave.
"""

from __future__ import annotations

import os
import time
from pathlib import Path


def record(ledger: Path | None, *, model: str, backend: str = "vllm") -> None:
    """Count one load of ``model`` (nothing when no ledger is set)."""
    if ledger is None:
        return
    line = f"{time.time():.3f}\t{os.getpid()}\t{backend}\t{model}\n".encode()
    fd = os.open(ledger, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def loads(ledger: Path, *, backend: str = "vllm") -> list[tuple[float, int, str]]:
    """The loads of ``backend`` counted in ``ledger``: (time, pid, model) each, in the order they began."""
    if not ledger.is_file():
        return []
    out = []
    for line in ledger.read_text().splitlines():
        when, pid, kind, model = line.split("\t", 3)
        if kind == backend:
            out.append((float(when), int(pid), model))
    return out

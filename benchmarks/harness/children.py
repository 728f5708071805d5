"""The processes a benchmark starts: their environment, a free loopback port, ``vlbatch api``, and their end.

``child_env`` is the one place a benchmark reads its own environment (``os.environ``): a child gets it without
any ``VLBATCH_`` variable (or other prefix the caller drops), so the settings the run sets are the only ones the
child sees, whatever the shell that started the benchmark had exported.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx


def child_env(settings: Mapping[str, str], *, drop: tuple[str, ...] = ("VLBATCH_",)) -> dict[str, str]:
    """This process's environment without the variables named ``drop*``, then ``settings`` over it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update(settings)
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class ApiProcess:
    base: str  # http://127.0.0.1:<port>
    pid: int


@contextmanager
def api_process(
    env: Mapping[str, str], log_path: Path, *, cwd: Path | None = None, ready_s: float = 60
) -> Iterator[ApiProcess]:
    """``vlbatch api`` on a free loopback port with exactly ``env`` (see ``child_env``), yielded once it answers
    ``/healthz``; SIGTERM on the way out, SIGKILL if it is not gone within 20 s (``stop_group``).

    Its output goes to ``log_path``: a pipe nobody reads would fill and stop the API mid-load on its next log line.
    It runs in a session of its own, so a Ctrl-C meant for the benchmark reaches it only as that SIGTERM."""
    port = free_port()
    exe = Path(sys.executable).with_name("vlbatch")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "cli.main"]
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            [*cmd, "api", "--host", "127.0.0.1", "--port", str(port)],
            env=dict(env),
            cwd=cwd,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + ready_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"vlbatch api exited: {log_path.read_text()[-2000:]}")
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"vlbatch api did not answer /healthz within {ready_s:.0f} s")
            time.sleep(0.1)
        yield ApiProcess(base, proc.pid)
    finally:
        stop_group(proc, grace_s=20)


def stop_group(proc: subprocess.Popen[Any], *, grace_s: float) -> None:
    """End a child started in a session of its own, and what it started: SIGTERM to its process group, SIGKILL
    after ``grace_s``. Nothing when it has exited already."""
    if proc.poll() is not None:
        return
    with suppress(ProcessLookupError):  # it exited between the poll and the signal
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)

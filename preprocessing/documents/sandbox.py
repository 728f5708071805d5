"""The bounded place documents are parsed in: child processes with a memory cap and a wall-time deadline.

Why: the parsers (pypdf, pdfium, lxml) run on untrusted bytes. A content stream shared by 500 pages, a flate
stream that inflates to gigabytes or a malformed object can pin a CPU for minutes, take gigabytes, or abort the
process from C (pdfium's SIGABRT). In a child, each of those becomes a coded error for that document and the
worker goes on: ``parse_timeout`` (the deadline passed; the child is killed), ``parse_memory`` (the
``RLIMIT_AS`` cap was hit) and ``parse_crashed`` (the child died of a signal).

Children are started with ``subprocess`` (fork immediately followed by exec, no Python code in between, so it
is safe from a threaded worker) running ``preprocessing.documents.child``. Starting one costs about a second
(the interpreter and the document libraries), so a child is reused for ``tasks_per_child`` calls and replaced
after any failure. ``call`` blocks while all ``processes`` children are busy.

``shared_sandbox`` is the one process-wide cache of them: the worker's document parser and image decoder each take
theirs from it, started once per process and closed at exit.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import pickle
import re
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypeVar

from preprocessing.documents.child import READY, peak_rss_bytes, write_frame
from preprocessing.input_errors import InputError
from vlbatch.errors import PARSE_CRASHED, PARSE_MEMORY, PARSE_TIMEOUT

__all__ = ["ParseBounds", "Sandbox", "Usage", "close_shared_sandboxes", "shared_sandbox"]

log = logging.getLogger(__name__)

T = TypeVar("T")

# What allocators print when RLIMIT_AS refuses them before they abort (Rust, C++, glibc, pdfium).
_OUT_OF_MEMORY = re.compile(rb"memory allocation of|bad_alloc|out of memory|cannot allocate memory", re.IGNORECASE)
_STDERR_TAIL = 4096
_ROOT = Path(__file__).resolve().parents[2]  # the directory that holds the preprocessing package
_STARTUP_S = 120.0  # a child loads the interpreter and the document libraries within this, even on a busy host


@dataclass(frozen=True, slots=True)
class ParseBounds:
    """Limits of one parser child: its address space, the wall time of one call, calls before it is replaced."""

    memory_bytes: int = 2 * 1024**3
    timeout_s: float = 120.0
    tasks_per_child: int = 64

    def __post_init__(self) -> None:
        if self.memory_bytes < 256 * 1024**2:
            raise ValueError(f"memory_bytes={self.memory_bytes} is below 256 MiB; the parser cannot even start")
        if self.timeout_s <= 0 or self.tasks_per_child < 1:
            raise ValueError(
                f"timeout_s={self.timeout_s} must be positive and tasks_per_child={self.tasks_per_child} at least 1"
            )


@dataclass(frozen=True, slots=True)
class Usage:
    """What one call cost: wall seconds and the child's peak resident memory during it (0 when unknown)."""

    seconds: float
    peak_rss_bytes: int


class _Child:
    """One parser process and its pipes; ``stderr`` goes to a temporary file, read back when it dies."""

    def __init__(self, bounds: ParseBounds) -> None:
        self.stderr: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the child
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "preprocessing.documents.child", str(bounds.memory_bytes), str(os.getpid())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            cwd=_ROOT,
            close_fds=True,
        )
        self.tasks = 0
        self._wait_ready()

    def _wait_ready(self) -> None:
        """Deadlines count from here: the start-up (about a second) is not the document's."""
        assert self.proc.stdout is not None
        deadline = time.monotonic() + _STARTUP_S
        try:
            ready = _read_exact(
                self.proc.stdout, int.from_bytes(_read_exact(self.proc.stdout, 8, deadline), "big"), deadline
            )
        except (TimeoutError, EOFError, OSError) as exc:
            tail = self.stderr_tail().decode("utf-8", "replace").strip()[-500:]
            self.close()
            raise RuntimeError(f"the document parser process did not start ({type(exc).__name__}): {tail}") from exc
        if ready != READY:
            self.close()
            raise RuntimeError(f"the document parser process said {ready[:40]!r} instead of ready")

    def kill(self) -> int:
        """Kill and reap the child; its peak resident memory in bytes (from the kernel's accounting)."""
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        return self.reap()

    def reap(self) -> int:
        peak = 0
        if self.proc.returncode is None:
            try:
                _, status, usage = os.wait4(self.proc.pid, 0)
                self.proc.returncode = os.waitstatus_to_exitcode(status)
                peak = usage.ru_maxrss * 1024
            except ChildProcessError:
                self.proc.returncode = self.proc.returncode if self.proc.returncode is not None else -1
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        return peak

    def stderr_tail(self) -> bytes:
        try:
            self.stderr.seek(0, os.SEEK_END)
            size = self.stderr.tell()
            self.stderr.seek(max(0, size - _STDERR_TAIL))
            return self.stderr.read()
        except (OSError, ValueError):
            return b""

    def close(self) -> None:
        self.kill()
        self.stderr.close()


# Children are started from this one thread, which lives as long as the process. A child's death signal
# (PR_SET_PDEATHSIG, armed in ``child._confine``) fires when the *thread* that started it ends, not the process:
# started from a caller's thread, a child was SIGKILLed as soon as that thread finished (a pool shut down, a
# request thread done), and the next call on it failed an innocent input as crashed.
_SPAWNER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sandbox-spawner")


class Sandbox:
    """Runs module-level functions in parser children within ``bounds``; see the module docstring."""

    def __init__(self, bounds: ParseBounds | None = None, *, processes: int = 1) -> None:
        if processes < 1:
            raise ValueError(f"processes={processes} must be at least 1")
        self.bounds = bounds or ParseBounds()
        self._slots = threading.BoundedSemaphore(processes)
        self._idle: list[_Child] = []
        self._lock = threading.Lock()
        self._closed = False

    def call(self, fn: Callable[..., T], /, *args: Any, what: str = "document", **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` in a child. Its ``InputError`` (or other exception) is raised here as it was;
        a deadline, the memory cap or a crash raise ``InputError`` with ``parse_timeout``, ``parse_memory`` or
        ``parse_crashed`` naming ``what``."""
        value, _ = self.call_measured(fn, *args, what=what, **kwargs)
        return value

    def call_measured(
        self, fn: Callable[..., T], /, *args: Any, what: str = "document", **kwargs: Any
    ) -> tuple[T, Usage]:
        """``call``, also returning what the call cost; a raised error carries it as ``usage``."""
        with self._slots:
            child = self._take()
            started = time.monotonic()
            try:
                status, payload, peak = self._exchange(child, (fn, args, kwargs, self.bounds.timeout_s), what, started)
            except InputError as exc:
                exc.usage = Usage(time.monotonic() - started, getattr(exc, "peak", 0))  # type: ignore[attr-defined]
                raise
            usage = Usage(time.monotonic() - started, peak)
            if status == "memory":
                child.close()
                raise _with_usage(InputError(PARSE_MEMORY, f"{what}: {self._memory_note()} ({payload})"), usage)
            self._give_back(child)
            if status == "error":
                raise _with_usage(payload, usage)
            return payload, usage

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for child in idle:
            child.close()

    # ---------------------------------------------------------------------------------------- internals

    def _take(self) -> _Child:
        with self._lock:
            if self._closed:
                raise RuntimeError("the parser sandbox is closed")
            while self._idle:
                child = self._idle.pop()
                if child.proc.poll() is None:
                    return child
                child.close()  # gone while idle (killed from outside): not this document's doing
        return _SPAWNER.submit(_Child, self.bounds).result()

    def _give_back(self, child: _Child) -> None:
        child.tasks += 1
        with self._lock:
            if not self._closed and child.tasks < self.bounds.tasks_per_child:
                self._idle.append(child)
                return
        child.close()

    def _memory_note(self) -> str:
        cap = self.bounds.memory_bytes // 1024**2
        return f"parsing needs more than the {cap} MiB cap (VLBATCH_DOCUMENT_PARSE_MEMORY_MB)"

    def _exchange(self, child: _Child, request: tuple[Any, ...], what: str, started: float) -> tuple[str, Any, int]:
        assert child.proc.stdin is not None and child.proc.stdout is not None
        deadline = started + self.bounds.timeout_s
        try:
            blob = pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL)
            write_frame(child.proc.stdin, blob)  # type: ignore[arg-type]
            head = _read_exact(child.proc.stdout, 8, deadline)
            body = _read_exact(child.proc.stdout, int.from_bytes(head, "big"), deadline)
        except TimeoutError:
            rss = peak_rss_bytes(child.proc.pid)
            child.kill()
            child.close()
            exc = InputError(
                PARSE_TIMEOUT, f"{what}: parsing took longer than {self.bounds.timeout_s:g} s; the parser was stopped"
            )
            exc.peak = rss  # type: ignore[attr-defined]
            raise exc from None
        except (EOFError, BrokenPipeError, ConnectionError, OSError):
            rss = child.reap()
            raise self._death(child, what, rss) from None
        answer: tuple[str, Any, int] = pickle.loads(body)
        return answer

    def _death(self, child: _Child, what: str, rss: int) -> InputError:
        code = child.proc.returncode
        tail = child.stderr_tail()
        child.close()
        if code is not None and code < 0:
            name = signal.Signals(-code).name if -code in signal.valid_signals() else f"signal {-code}"
        else:
            name = f"exit status {code}"
        if _OUT_OF_MEMORY.search(tail) or (code is not None and -code == signal.SIGXCPU):
            kind = PARSE_MEMORY if _OUT_OF_MEMORY.search(tail) else PARSE_TIMEOUT
            note = self._memory_note() if kind == PARSE_MEMORY else "the parser ran out of CPU time"
            exc = InputError(kind, f"{what}: {note}; it died of {name}")
        else:
            last = tail.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
            exc = InputError(PARSE_CRASHED, f"{what}: the parser died of {name} {last[0][:200]}".rstrip())
        exc.peak = rss  # type: ignore[attr-defined]
        log.warning("%s", exc.message)
        return exc


_shared: dict[tuple[str, ParseBounds, int], Sandbox] = {}
_shared_lock = threading.Lock()


def shared_sandbox(purpose: str, bounds: ParseBounds, *, processes: int) -> Sandbox:
    """This process's children for ``purpose`` ("documents", "images") within ``bounds``: started once per
    process (per purpose, bounds and ``processes``, so documents never wait on images' children) and closed at
    exit."""
    key = (purpose, bounds, processes)
    with _shared_lock:
        if key not in _shared:
            _shared[key] = Sandbox(bounds, processes=processes)
            atexit.register(_shared[key].close)
        return _shared[key]


def close_shared_sandboxes() -> None:
    """Stop every shared child of this process now (tests; a process that exits closes them through atexit)."""
    with _shared_lock:
        boxes = list(_shared.values())
        _shared.clear()
    for box in boxes:
        box.close()


def _with_usage(exc: BaseException, usage: Usage) -> BaseException:
    with contextlib.suppress(AttributeError):
        exc.usage = usage  # type: ignore[attr-defined]
    return exc


def _read_exact(stream: IO[bytes], size: int, deadline: float) -> bytes:
    """``size`` bytes from a pipe, or ``TimeoutError`` at ``deadline``, or ``EOFError`` if it closes first."""
    fd = stream.fileno()
    chunks: list[bytes] = []
    left = size
    while left:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        ready, _, _ = select.select([fd], [], [], remaining)
        if not ready:
            raise TimeoutError
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)

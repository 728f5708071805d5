"""The parser child's side of ``preprocessing.documents.sandbox``: ``python -m preprocessing.documents.child``.

It caps its own address space (``RLIMIT_AS``), turns core dumps off, asks the kernel to kill it when its
parent dies (Linux), imports the document libraries once, then answers calls one at a time on a private pipe:
each request is a length-prefixed pickle of ``(function, args, kwargs)``, each answer one of
``("ok", value, peak_rss)``, ``("error", exception, peak_rss)`` or ``("memory", message, peak_rss)``. Before each
call the CPU-time limit is set to the call's deadline plus a margin, so even an orphaned child stops. After a
``MemoryError`` (or an error raised from one, as an image's ``decode_memory`` is) the child answers and exits: its
heap may be left in any state.
"""

from __future__ import annotations

import ctypes
import os
import pickle
import resource
import signal
import struct
import sys
from typing import Any, BinaryIO

_HEADER = struct.Struct("!Q")
READY = b"ready"  # the first frame: the libraries are loaded, deadlines may start
_CPU_MARGIN_S = 5
_PR_SET_PDEATHSIG = 1
_M_ARENA_MAX = -8


def read_frame(stream: BinaryIO) -> bytes | None:
    """One length-prefixed frame, or None at end of stream."""
    head = stream.read(_HEADER.size)
    if len(head) < _HEADER.size:
        return None
    (size,) = _HEADER.unpack(head)
    body = stream.read(size)
    return body if len(body) == size else None


def write_frame(stream: BinaryIO, payload: bytes) -> None:
    stream.write(_HEADER.pack(len(payload)) + payload)
    stream.flush()


def _confine(memory_bytes: int, parent_pid: int) -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        # Each malloc arena reserves 64 MB of address space, which RLIMIT_AS counts: two are plenty here.
        libc.mallopt(_M_ARENA_MAX, 2)
    if os.getppid() != parent_pid:  # the parent died before the death signal was armed
        os._exit(0)


def _warm() -> None:
    """Import what the parsers import lazily, once per child rather than once per document."""
    import charset_normalizer  # noqa: F401
    import docx  # noqa: F401
    import pypdf  # noqa: F401
    import pypdfium2  # noqa: F401


def reset_peak_rss() -> None:
    """Start a new peak: the next ``peak_rss_bytes("self")`` covers only what happens after this call."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:  # "5" resets VmHWM, the peak resident set
            fh.write("5")
    except OSError:
        pass


def peak_rss_bytes(pid: int | str = "self") -> int:
    """VmHWM of a process (Linux); 0 where it cannot be read."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def _limit_cpu(timeout_s: float) -> None:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    spent = usage.ru_utime + usage.ru_stime
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    soft = int(spent + timeout_s) + _CPU_MARGIN_S
    resource.setrlimit(resource.RLIMIT_CPU, (soft if hard == resource.RLIM_INFINITY else min(soft, hard), hard))


def _answer(fn: Any, args: Any, kwargs: Any) -> tuple[str, Any]:
    try:
        return "ok", fn(*args, **kwargs)
    except MemoryError as exc:
        return "memory", f"MemoryError: {exc}"
    except Exception as exc:
        if isinstance(exc.__cause__, MemoryError):  # wrapped by the caller's own error (an image's decode_memory)
            return "memory", f"MemoryError: {exc}"
        return "error", exc


def serve(requests: BinaryIO, answers: BinaryIO) -> None:
    while (frame := read_frame(requests)) is not None:
        fn, args, kwargs, timeout_s = pickle.loads(frame)
        _limit_cpu(timeout_s)
        reset_peak_rss()
        status, payload = _answer(fn, args, kwargs)
        peak = peak_rss_bytes()
        try:
            blob = pickle.dumps((status, payload, peak), protocol=pickle.HIGHEST_PROTOCOL)
        except MemoryError:
            status, blob = "memory", pickle.dumps(("memory", "MemoryError while sending the answer", peak))
        except Exception as exc:  # an exception type that does not pickle: send its text
            blob = pickle.dumps(("error", RuntimeError(f"{type(payload).__name__}: {exc}"), peak))
        write_frame(answers, blob)
        if status == "memory":
            return


def main() -> None:
    memory_bytes, parent_pid = int(sys.argv[1]), int(sys.argv[2])
    # The protocol owns the original stdout; stray prints from a library go to stderr instead.
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    _confine(memory_bytes, parent_pid)
    _warm()
    write_frame(answers, READY)
    serve(sys.stdin.buffer, answers)


if __name__ == "__main__":
    main()

"""What a command shows on the terminal: its own output only; every log line goes to its log file.

A quiet command (the default) keeps its own ``sys.stdout`` and ``sys.stderr`` on the terminal and points file
descriptors 1 and 2 at the log file underneath them, so whatever is not the command's own Python output lands
there: log records (``vlbatch.logs``), warnings, C libraries writing to stderr, and the engine core vLLM starts as a
child process, which inherits the descriptors (a forked child gets its Python streams put back on them as well).
Libraries that print through a handler of their own (torch, transformers) get the log as its default stream, and
tqdm bars are off: the command draws its own progress.
The log file is ``vlbatch-<command>.log`` in the work directory (``VLBATCH_LOG_FILE`` names another): each run of
a command starts it anew under a header line, so two commands run one after the other keep their own logs, and a run
that logged nothing removes it. ``-v`` (or ``VLBATCH_LOG_LEVEL``) keeps everything on the terminal instead.

The services (``api``, ``worker``) are not quiet: their logs are their output, one line per event on stderr.
"""

from __future__ import annotations

import io
import logging
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vlbatch import logs

_quiet_forks = False  # os.register_at_fork takes no unregister: one hook per process, on while a log file is open
_current: QuietRun | None = None


@dataclass
class QuietRun:
    """A command's terminal and its log file; ``finish`` says where the log is (None: nothing was logged)."""

    path: Path
    level: str = "INFO"
    fixed: bool = False  # VLBATCH_LOG_FILE named it: a command's work directory does not move it
    _header: int = 0
    # The streams replaced by the terminal's copies: held, as their descriptors (1 and 2, now the log) are theirs.
    _terminal: tuple[io.TextIOBase, io.TextIOBase] | None = field(default=None, repr=False)

    def start(self, argv: list[str]) -> None:
        global _quiet_forks
        self.path = self.path.resolve()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        sys.stdout.flush()
        sys.stderr.flush()
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        out, err = os.dup(1), os.dup(2)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        header = f"--- vlbatch {' '.join(argv)}  {time.strftime('%Y-%m-%d %H:%M:%S %z')}  pid {os.getpid()}\n"
        self._header = os.write(1, header.encode())
        self._terminal = (sys.stdout, sys.stderr)  # type: ignore[assignment]
        sys.stdout = _reopen(out, sys.stdout)
        sys.stderr = _reopen(err, sys.stderr)
        if not _quiet_forks:
            os.register_at_fork(after_in_child=_streams_on_descriptors)
            _quiet_forks = True
        _library_handlers_to_log(_on_descriptor(2))
        os.environ["TQDM_DISABLE"] = "1"  # a library's own progress bar writes to sys.stderr; the command draws its own
        logs.configure(level=self.level, file=self.path, max_chars=None)
        global _current
        _current = self

    def move_to(self, directory: Path) -> None:
        """Carry the log on in ``directory`` under the same name, with what this run has logged so far."""
        path = (directory / self.path.name).resolve()
        if self.fixed or path == self.path:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        os.write(fd, self.path.read_bytes())
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        self.path.unlink(missing_ok=True)
        self.path = path
        logs.configure(level=self.level, file=self.path, max_chars=None)

    def finish(self) -> Path | None:
        """Flush, and remove the file when nothing but the header was written."""
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        size = self.path.stat().st_size if self.path.exists() else 0
        if size > self._header:
            return self.path
        self.path.unlink(missing_ok=True)
        return None


def work_directory(directory: Path) -> None:
    """A command's work directory (``demo --workdir``): its log goes there, unless VLBATCH_LOG_FILE names one."""
    if _current is not None:
        _current.move_to(directory)


def _reopen(fd: int, like: object) -> io.TextIOWrapper:
    """A text stream on ``fd`` with the encoding and error handling of the stream it replaces."""
    encoding = getattr(like, "encoding", None) or "utf-8"
    errors = getattr(like, "errors", None) or "strict"
    return io.TextIOWrapper(os.fdopen(fd, "wb", buffering=0), encoding=encoding, errors=errors, write_through=True)


def _library_handlers_to_log(log_stream: io.TextIOWrapper) -> None:
    """A handler a library makes for itself with no stream (``logging.StreamHandler()``, as torch and transformers do
    when first imported) writes to the log, not to the command's ``sys.stderr``: those libraries stop their records
    at their own handler, so the root's never sees them."""
    init = logging.StreamHandler.__init__
    if getattr(init, "_vlbatch_quiet", False):
        return

    def quiet_init(self: logging.StreamHandler[Any], stream: Any = None) -> None:
        init(self, log_stream if stream is None else stream)

    quiet_init._vlbatch_quiet = True  # type: ignore[attr-defined]
    logging.StreamHandler.__init__ = quiet_init  # type: ignore[method-assign]


def _on_descriptor(fd: int) -> io.TextIOWrapper:
    """A text stream on descriptor ``fd`` as it is at each write (``move_to`` points it at another file)."""
    return io.TextIOWrapper(os.fdopen(fd, "wb", buffering=0, closefd=False), encoding="utf-8", write_through=True)


def _streams_on_descriptors() -> None:
    """In a forked child (vLLM's engine core may be one): its Python streams back on descriptors 1 and 2, the log."""
    sys.stdout = _on_descriptor(1)
    sys.stderr = _on_descriptor(2)

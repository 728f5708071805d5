"""Reading a client-named file inside the allowed roots without being led out of them or made to wait.

Whether a path may be read at all is ``vlbatch.paths.confined``'s rule (lexically, then resolved, inside a root);
``confined_path`` gives its refusal the item's code. Only a regular file is then opened. Anything else is refused
from its ``stat`` before it is opened: a FIFO would block ``open`` until a writer appears, a device can act on open
(a watchdog, a tape), a socket cannot be read at all. The open itself adds ``O_NONBLOCK`` (a FIFO swapped in after
the check still cannot block), ``O_NOFOLLOW`` (nor a symlink) and ``O_NOCTTY``, and the opened file is checked once
more: regular, and where ``/proc`` says it is.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from preprocessing.input_errors import InputError
from vlbatch.errors import FETCH_ERROR, NOT_FOUND, NOT_REGULAR_FILE, OUTSIDE_ROOTS, TOO_LARGE
from vlbatch.paths import PathRefused, confined, inside

__all__ = ["confined_path", "open_regular_file", "read_regular_file", "read_up_to"]

_BLOCK = 1024 * 1024
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)


_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def confined_path(raw: str, roots: Sequence[Path]) -> Path:
    """``raw`` resolved, when it exists inside one of ``roots`` (``vlbatch.paths.confined``); otherwise
    ``InputError`` with the item's code: ``not_found`` (only ever inside the roots) or ``outside_roots``."""
    try:
        return confined(raw, roots, must_exist=True)
    except PathRefused as exc:
        raise InputError(NOT_FOUND if exc.missing else OUTSIDE_ROOTS, exc.message) from None


@contextmanager
def open_regular_file(path: Path, *, roots: Sequence[Path] = ()) -> Iterator[tuple[int, os.stat_result]]:
    """A read-only descriptor of the regular file ``path`` and its ``fstat``, never blocking on a special file.

    ``path`` should come from ``confined_path``; with ``roots`` the opened file must still be inside them.
    """
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise InputError(NOT_FOUND, f"{path}: no such file") from None
    except (OSError, ValueError) as exc:
        raise InputError(NOT_FOUND, f"{path!r}: {exc}") from None
    if not stat.S_ISREG(mode):
        raise InputError(NOT_REGULAR_FILE, f"{path} is {_kind(mode)}; only regular files are read")
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as exc:
        raise InputError(FETCH_ERROR, f"{path}: cannot open ({exc.strerror})") from None
    try:
        opened = os.fstat(fd)
        if not stat.S_ISREG(opened.st_mode):
            raise InputError(NOT_REGULAR_FILE, f"{path} became {_kind(opened.st_mode)}; only regular files are read")
        if roots and not _opened_inside(fd, roots):
            raise InputError(OUTSIDE_ROOTS, f"{path} moved outside the allowed roots while it was opened")
        yield fd, opened
    finally:
        os.close(fd)


def read_regular_file(path: Path, *, max_bytes: int, roots: Sequence[Path] = (), too_large: str = TOO_LARGE) -> bytes:
    """The bytes of the regular file ``path``, at most ``max_bytes`` (``InputError(too_large)`` beyond)."""
    with open_regular_file(path, roots=roots) as (fd, opened):
        if opened.st_size > max_bytes:
            raise InputError(too_large, f"{path} is {opened.st_size} bytes, limit {max_bytes}")
        try:
            data = read_up_to(fd, max_bytes + 1)
        except OSError as exc:
            raise InputError(FETCH_ERROR, f"{path}: {exc.strerror}") from None
    if len(data) > max_bytes:  # it grew after the stat
        raise InputError(too_large, f"{path} is over the limit of {max_bytes} bytes")
    return data


def read_up_to(fd: int, limit: int) -> bytes:
    """Up to ``limit`` bytes from ``fd``, fewer at its end."""
    blocks: list[bytes] = []
    total = 0
    while total < limit and (block := os.read(fd, min(_BLOCK, limit - total))):
        blocks.append(block)
        total += len(block)
    return b"".join(blocks)


def _opened_inside(fd: int, roots: Sequence[Path]) -> bool:
    """Where the kernel says the open file is (Linux ``/proc``); elsewhere the resolved path's check stands."""
    link = f"/proc/self/fd/{fd}"
    try:
        return inside(os.readlink(link), roots)
    except OSError:
        return True

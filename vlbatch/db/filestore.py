"""Where file contents live: one directory, one file per stored file, written in pieces, never held whole.

A file is written to a temporary name and renamed into place only once it is complete and under its cap, so
a reader never sees half a file and an upload that breaks the cap leaves nothing behind. Rows in ``files``
(``vlbatch.db.batches``) name what is stored here.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from vlbatch.errors import FILE_CONTENT_MISSING, UPLOAD_TOO_LARGE, VlbatchError

PIECE_BYTES = 1 << 20  # read and written a mebibyte at a time


class TooLarge(VlbatchError):
    code = UPLOAD_TOO_LARGE


class Missing(VlbatchError):
    code = FILE_CONTENT_MISSING


class FileStore:
    def __init__(self, root: Path) -> None:
        self.root = root

    def _dir(self) -> Path:
        self.root.mkdir(parents=True, exist_ok=True)
        return self.root

    def path(self, stored_as: str) -> Path:
        return self.root / stored_as

    def write(self, pieces: Iterable[bytes], *, max_bytes: int) -> tuple[str, int]:
        """Store ``pieces``; returns (name, size). ``TooLarge`` past ``max_bytes``, with nothing kept."""
        name = uuid.uuid4().hex
        tmp = self._dir() / f".{name}.part"
        size = 0
        try:
            with tmp.open("wb") as fh:
                for piece in pieces:
                    size += len(piece)
                    if size > max_bytes:
                        raise TooLarge(
                            f"the file is bigger than the limit of {max_bytes} bytes (VLBATCH_MAX_UPLOAD_BYTES)"
                        )
                    fh.write(piece)
            os.replace(tmp, self.root / name)
        finally:
            tmp.unlink(missing_ok=True)
        return name, size

    def writer(self) -> Writer:
        """A file written line by line (a batch's output): ``add`` pieces, then ``keep`` or ``discard``."""
        return Writer(self._dir())

    def _open(self, stored_as: str) -> BinaryIO:
        try:
            return self.path(stored_as).open("rb")
        except FileNotFoundError:
            raise Missing(
                "the file's bytes are not in this data dir (VLBATCH_DATA_DIR): removed, or stored by an API "
                "with a data dir of its own; upload the file again"
            ) from None

    def read(self, stored_as: str) -> Iterator[bytes]:
        """The file in pieces; opened now (``Missing`` when its bytes are gone), read as the pieces are taken."""
        return _pieces(self._open(stored_as))

    def lines(self, stored_as: str, *, max_bytes: int) -> Iterator[bytes | LineTooLong]:
        """The file's lines (without their end), one at a time, none held past ``max_bytes``: a longer line is
        skipped a piece at a time and stands as ``LineTooLong``. Opened now (``Missing`` when gone)."""
        return _lines(self._open(stored_as), max_bytes)

    def delete(self, stored_as: str) -> None:
        self.path(stored_as).unlink(missing_ok=True)


@dataclass(frozen=True)
class LineTooLong:
    """A line longer than the cap, in place of its bytes: how long it was."""

    size: int

    def strip(self) -> bytes:  # never blank: it stands for a line that holds something
        return b"-"


def _pieces(fh: BinaryIO) -> Iterator[bytes]:
    with fh:
        while piece := fh.read(PIECE_BYTES):
            yield piece


def _lines(fh: BinaryIO, max_bytes: int) -> Iterator[bytes | LineTooLong]:
    with fh:
        while line := fh.readline(max_bytes + 1):
            if len(line) <= max_bytes or line.endswith(b"\n"):
                yield line.rstrip(b"\r\n")
                continue
            size = len(line)
            while (rest := fh.readline(PIECE_BYTES)) and not rest.endswith(b"\n"):
                size += len(rest)
            yield LineTooLong(size + len(rest.rstrip(b"\r\n")))


class Writer:
    """One file being written under a temporary name; ``keep`` renames it into place."""

    def __init__(self, root: Path) -> None:
        self.name = uuid.uuid4().hex
        self.size = 0
        self._root = root
        self._tmp = root / f".{self.name}.part"
        self._fh: BinaryIO | None = self._tmp.open("wb")

    def add(self, piece: bytes) -> None:
        assert self._fh is not None
        self._fh.write(piece)
        self.size += len(piece)

    def keep(self) -> tuple[str, int]:
        assert self._fh is not None
        self._fh.close()
        self._fh = None
        os.replace(self._tmp, self._root / self.name)
        return self.name, self.size

    def discard(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        self._tmp.unlink(missing_ok=True)

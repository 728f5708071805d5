"""The file store's line reader: a line past the cap is skipped a piece at a time and stands as its length."""

from __future__ import annotations

from pathlib import Path

import pytest

from vlbatch.db.filestore import PIECE_BYTES, FileStore, LineTooLong, Missing


def test_lines_past_the_cap_stand_as_their_length(tmp_path: Path) -> None:
    fs = FileStore(tmp_path)
    long = b"y" * (3 * PIECE_BYTES + 7)
    content = b"a\r\n" + long + b"\n" + b"x" * 10 + b"\n\n" + b"b" * 11 + b"\n" + long
    name, _ = fs.write([content], max_bytes=len(content))
    got = list(fs.lines(name, max_bytes=10))
    assert got == [b"a", LineTooLong(len(long)), b"x" * 10, b"", LineTooLong(11), LineTooLong(len(long))]


def test_a_file_whose_bytes_are_gone_is_missing_when_opened(tmp_path: Path) -> None:
    fs = FileStore(tmp_path)
    with pytest.raises(Missing):
        fs.read("nothing-here")  # at once, not when the first piece is taken
    with pytest.raises(Missing):
        fs.lines("nothing-here", max_bytes=10)

"""What several route modules read from a request alike: an item's id in a path, and the page cursors the API hands
out (a position in ``next_cursor``; ``w:<position>`` for results, paged by write position). A cursor the API never
handed out is refused with ``bad_cursor``."""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import Path

from api.http_errors import RequestRefused
from vlbatch.errors import BAD_CURSOR

ItemId = Annotated[int, Path(ge=1, le=2**62, description="The item's id (``item_id`` of its result).")]

# What ``next_cursor`` is built from: a position (-1: before the first). ``int()`` alone would also take spaces,
# underscores and any script's digits (`` 5 ``, ``1_000``, ``٣``), cursors the API never hands out.
_POSITION = re.compile(r"-1|[0-9]+")


def position_cursor(cursor: str | None) -> int:
    """A page cursor that is a position (an item's seq, a write position): the page starts after it."""
    if cursor is None:
        return -1
    if _POSITION.fullmatch(cursor) is None:
        raise RequestRefused(BAD_CURSOR, f"bad cursor '{cursor[:80]}'")
    seq = int(cursor)
    if not -1 <= seq < 2**63:  # a seq is a BIGINT; anything past it would overflow the driver, not page
        raise RequestRefused(BAD_CURSOR, f"bad cursor '{cursor[:80]}': out of range")
    return seq


def written_cursor(cursor: str | None) -> int:
    """A results cursor, ``w:<position>``: the write position the page starts after."""
    if cursor is None:
        return -1
    kind, sep, position = cursor.partition(":")
    if kind != "w" or not sep:
        raise RequestRefused(BAD_CURSOR, f"bad cursor '{cursor[:80]}': a results cursor reads 'w:<n>'")
    return position_cursor(position)

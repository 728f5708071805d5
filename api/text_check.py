"""Strings a request may not carry: NUL (PostgreSQL text and file paths refuse it) and lone UTF-16 surrogates
(no UTF-8 encoding exists, so storing or answering them fails). Found here, they are a 422 up front instead of
a 500 from the driver, the file system or the JSON encoder later."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from starlette.requests import Request

from vlbatch.errors import INVALID_REQUEST, VlbatchError

_BAD = re.compile("[\x00\ud800-\udfff]")
_WALK_LIMIT = 1_000_000  # strings checked per value; a body over the size cap never gets this far


def text_fault(value: Any, where: str = "body") -> str | None:
    """A message naming the first string in ``value`` (dict keys and values, list members, nested) that holds
    NUL or a lone surrogate, or None when every string is clean."""
    for path, text in _strings(value, where):
        if (m := _BAD.search(text)) is not None:
            what = "a NUL character" if m.group() == "\x00" else f"a lone surrogate (U+{ord(m.group()):04X})"
            return f"{path} holds {what} at position {m.start()}; text must be valid Unicode without NUL"
    return None


def _strings(value: Any, path: str) -> Iterator[tuple[str, str]]:
    stack: list[tuple[str, Any]] = [(path, value)]
    seen = 0
    while stack and seen < _WALK_LIMIT:
        at, v = stack.pop()
        seen += 1
        if isinstance(v, str):
            yield at, v
        elif isinstance(v, dict):
            for k in v:
                if isinstance(k, str):
                    yield f"{at} key", k
            # pushed last first, so the first field is checked first and named in the message
            stack.extend((f"{at}.{k}" if isinstance(k, str) else at, sub) for k, sub in reversed(v.items()))
        elif isinstance(v, list | tuple):
            stack.extend((f"{at}[{i}]", sub) for i, sub in reversed(list(enumerate(v))))


def printable(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters with NUL and surrogates written as escapes (``\\x00``, ``\\ud800``): safe
    to encode in an answer, and to store where a client keeps the answers it got."""
    cut = text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"
    return cut.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode("utf-8")


def refuse_bad_url_text(request: Request) -> None:
    """A dependency of every route: path segments and query values decoded from ``%00`` hold NUL, which a lookup
    by that value would hand to the database."""
    params = {f"path {k}": v for k, v in request.path_params.items()}
    params.update({f"query {k}": v for k, v in request.query_params.multi_items()})
    for where, value in params.items():
        if isinstance(value, str) and (fault := text_fault(value, where)) is not None:
            raise VlbatchError(fault, code=INVALID_REQUEST)

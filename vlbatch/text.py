"""Strings that cannot be stored or answered: NUL (PostgreSQL text and file paths refuse it) and lone UTF-16
surrogates (no UTF-8 encoding exists). ``text_fault`` finds them in any parsed value; ``printable`` makes a
string safe to echo. Standard library only: the API (``api.text_check``) and the batch line checker use it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

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


def clean(text: str) -> bool:
    """Whether ``text`` holds neither NUL nor a lone surrogate (what ``text_fault`` finds in a value's strings)."""
    return _BAD.search(text) is None


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


def wide_object(value: Any, max_keys: int, where: str = "body") -> str | None:
    """A message naming the first object in ``value`` with more than ``max_keys`` keys, or None. Checked before a
    schema is: a body of a million unknown keys is one refusal, not a million validation errors."""
    stack: list[tuple[str, Any]] = [(where, value)]
    while stack:
        at, v = stack.pop()
        if isinstance(v, dict):
            if len(v) > max_keys:
                return f"{at} has {len(v)} keys; an object may have at most {max_keys}"
            stack.extend((f"{at}.{printable(str(k), 40)}", sub) for k, sub in v.items() if isinstance(sub, dict | list))
        elif isinstance(v, list):
            stack.extend((f"{at}[{i}]", sub) for i, sub in enumerate(v) if isinstance(sub, dict | list))
    return None

"""The registry's mechanism: the ``ErrorCode`` record, the one ``_CODES`` table, ``_define`` and ``lookup``.

The area modules beside this one call ``_define`` for each of their codes; ``vlbatch.errors`` re-exports all of
it. Standard library only, like ``vlbatch.errors``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

Use = Literal["item", "api", "worker", "cli"]
USES: tuple[Use, ...] = ("item", "api", "worker", "cli")


@dataclass(frozen=True, slots=True)
class ErrorCode:
    code: str
    meaning: str
    retryable: bool  # the same request or item, unchanged, may succeed later
    http_status: int  # what the API answers when this error reaches it
    used_in: frozenset[Use]


_CODES: dict[str, ErrorCode] = {}
CODES: Mapping[str, ErrorCode] = MappingProxyType(_CODES)


def _define(code: str, http_status: int, used_in: set[Use], meaning: str, *, retryable: bool = False) -> str:
    if code in _CODES:
        raise ValueError(f"error code {code!r} is defined twice")
    _CODES[code] = ErrorCode(code, meaning, retryable, http_status, frozenset(used_in))
    return code


def lookup(code: str) -> ErrorCode:
    """The registry entry of ``code``; ``KeyError`` naming the known codes when there is none."""
    try:
        return _CODES[code]
    except KeyError:
        raise KeyError(
            f"unknown error code {code!r}; register it in its area's module of vlbatch/error_codes/ and re-export "
            f"it from vlbatch/errors.py (known: {sorted(_CODES)})"
        ) from None

"""OpenAI's expiry shape, checked once for batches (``output_expires_after``) and files (``expires_after``):
``{"anchor": "created_at", "seconds": N}`` with N from an hour to 30 days. A refusal is ``invalid_expiry``.

The multipart form of a file upload spells it ``expires_after[anchor]`` and ``expires_after[seconds]``
(``from_form``), as OpenAI's clients send it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jobs.refusals import JobRefused
from vlbatch.errors import INVALID_EXPIRY

MIN_SECONDS = 3600
MAX_SECONDS = 30 * 86400


def seconds(value: Any, *, name: str) -> int | None:
    """The seconds ``value`` asks for (None: no value, the tenant's default applies)."""
    if value is None:
        return None
    if not isinstance(value, Mapping) or set(value) - {"anchor", "seconds"}:
        raise JobRefused(INVALID_EXPIRY, f"{name} must be {{'anchor': 'created_at', 'seconds': N}}")
    if value.get("anchor") != "created_at":
        raise JobRefused(INVALID_EXPIRY, f"{name}.anchor must be 'created_at', not {value.get('anchor')!r}")
    n = value.get("seconds")
    if isinstance(n, str) and n.strip().isdigit():
        n = int(n)
    if isinstance(n, bool) or not isinstance(n, int) or not MIN_SECONDS <= n <= MAX_SECONDS:
        raise JobRefused(
            INVALID_EXPIRY,
            f"{name}.seconds must be a whole number from {MIN_SECONDS} (1 hour) to {MAX_SECONDS} (30 days), not {n!r}",
        )
    return n


def from_form(fields: Mapping[str, str], *, name: str = "expires_after") -> int | None:
    """The seconds a multipart form's ``expires_after[anchor]`` and ``expires_after[seconds]`` ask for."""
    parts = {
        key[len(name) + 1 : -1]: v for key, v in fields.items() if key.startswith(f"{name}[") and key.endswith("]")
    }
    if name in fields:
        raise JobRefused(INVALID_EXPIRY, f"{name} must be sent as {name}[anchor] and {name}[seconds]")
    return seconds(parts, name=name) if parts else None

"""The service's one refusal: a job operation that cannot be done as asked, with the registered code that says why.

The API answers it with the code's HTTP status and the message as they stand (``api.http_errors``); the commands print
them. Raised before anything is committed, so a refused operation leaves no row behind.
"""

from __future__ import annotations

from vlbatch.errors import VlbatchError


class JobRefused(VlbatchError):
    """A submit, re-run or state change refused; ``code`` names the rule it breaks (a quota, a size, a state)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message, code=code)

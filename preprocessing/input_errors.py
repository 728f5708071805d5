"""Errors raised while turning raw inputs into model-ready objects."""

from __future__ import annotations

from vlbatch.errors import VlbatchError


class InputError(VlbatchError):
    """A bad input item: ``code`` (a registered one, see ``vlbatch.errors``) says what is wrong with it and
    becomes the item's error code; ``message`` names the input and the fix.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message, code=code)
        self.args = (f"{code}: {message}",)  # a traceback or log line shows the code too

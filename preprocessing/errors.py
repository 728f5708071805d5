"""Errors raised while turning raw inputs into model-ready objects."""

from __future__ import annotations


class InputError(Exception):
    """A bad input item. ``code`` is stable and machine-readable; ``message`` is for humans.

    Codes: decode_error, empty_file, too_large, image_bomb, not_found, fetch_error, outside_roots,
    unsupported_source, bad_aspect_ratio.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message

    def __reduce__(self) -> tuple[type[InputError], tuple[str, str]]:  # picklable across processes
        return (type(self), (self.code, self.message))

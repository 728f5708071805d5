"""An NDJSON upload's item line read as its model reads it, the common shape without the model.

Validating each line with ``ItemIn`` (or ``DocumentIn``) cost most of a million-line upload: the models' text check
(``schemas.Strict``) walks every parsed line in Python. A line of the common shape (an object of its main key and an
optional ``ref``: for an image item ``images``, a non-empty list of strings; for a document ``path``, a string) is
parsed by the parser the model uses (``pydantic_core.from_json``) and checked by hand for what the model checks: no
other key, the types, the lengths, no NUL or lone surrogate in a string. Anything else, valid or not, is read by the
model, so every refusal is the model's own, word for word (``tests/api/test_ndjson_items.py`` holds the two ways to
the same answers).
"""

from __future__ import annotations

from typing import Any

from pydantic_core import from_json

from api.schemas import MAX_DOCUMENT_PATH_CHARS, MAX_REF_CHARS, DocumentIn, ItemIn
from vlbatch.text import clean

__all__ = ["document_line", "image_line"]


def image_line(line: bytes) -> tuple[list[str], str | None]:
    """(images, ref) of an image item line; the ``ValidationError`` of ``ItemIn`` when it is not one."""
    value = _object(line, "images")
    if value is not None:
        images, ref = value
        if type(images) is list and images and all(type(s) is str and clean(s) for s in images):
            return images, ref
    item = ItemIn.model_validate_json(line)
    return item.images, item.ref


def document_line(line: bytes) -> tuple[str, str | None]:
    """(path, ref) of a document item line; the ``ValidationError`` of ``DocumentIn`` when it is not one."""
    value = _object(line, "path")
    if value is not None:
        path, ref = value
        if type(path) is str and 0 < len(path) <= MAX_DOCUMENT_PATH_CHARS and clean(path):
            return path, ref
    doc = DocumentIn.model_validate_json(line)
    return doc.path, doc.ref


def _object(line: bytes, key: str) -> tuple[Any, str | None] | None:
    """(the value of ``key``, ``ref``) of a line that is a JSON object of ``key`` and at most a valid ``ref``; None
    for anything else (not JSON, another key, a ``ref`` the model refuses)."""
    try:
        value = from_json(line, allow_inf_nan=False, cache_strings="keys")
    except ValueError:
        return None
    if type(value) is not dict or key not in value or len(value) > (2 if "ref" in value else 1):
        return None
    ref = value.get("ref")
    if ref is not None and not (type(ref) is str and len(ref) <= MAX_REF_CHARS and clean(ref)):
        return None
    return value[key], ref

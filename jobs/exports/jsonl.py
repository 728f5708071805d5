"""Results as JSON lines: one object per finished item, the fields of the API's ``ResultOut`` in its order.

Each line is byte for byte ``json.dumps(ResultOut.model_dump(mode="json"))``, built by formatting (about three
times faster than a dict through ``json.dumps``) with a format built at import from the declaration
(``vlbatch.db.result_fields.EXPORTED_FIELDS``), each value turned into its text by its field's kind: strings go
through ``json``'s own escaping, and the stored JSON texts (``output``, ``tags``) go in as they are when they are
one ASCII line, which is what ``json.dumps`` wrote.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from json.encoder import encode_basestring_ascii
from operator import attrgetter, call
from typing import Any

from vlbatch.db.result_fields import EXPORTED_FIELDS, ITEM_FIELDS, ResultField
from vlbatch.db.results import ResultRecord

__all__ = ["jsonl_chunks", "jsonl_lines"]


def _json_text(text: str | None) -> str:
    """Stored JSON text as it goes into a line: as is when it is one ASCII line, else decoded and encoded again."""
    if text is None:
        return "null"
    if text.isascii() and "\n" not in text and "\r" not in text:
        return text
    return json.dumps(json.loads(text))


def _null_or(encode: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda value: "null" if value is None else encode(value)


def _piece(f: ResultField) -> tuple[str, str, Callable[[Any], Any], Any]:
    """A declared field's place in a line: its format, the record's attribute it is written from, how a value
    becomes its text, and its text without a result. An ``integer`` field with an ``empty`` value is never None;
    one that is never None in a result (not ``nullable``) skips the check. A ``json`` field is written from the
    record's JSON text of it (``<name>_json`` when the record has one: the stored text or a fallback; else the
    stored text)."""
    if f.json:
        attr = f"{f.name}_json" if hasattr(ResultRecord, f"{f.name}_json") else str(f.read)
        return "%s", attr, _json_text, "null"
    if f.sql == "integer" and f.empty is not None:
        return "%d", str(f.read), int, f.empty
    encode = encode_basestring_ascii if f.sql == "text" else str
    return "%s", str(f.read), _null_or(encode) if f.nullable else encode, "null"


_ITEM_FORMATS = {"item_id": "%d", "seq": "%d"}  # the item's others are strings, ``status`` never None
_PIECES = [_piece(f) for f in EXPORTED_FIELDS]
# The line's format, built from the declaration at import: the exported fields in order, keys as json.dumps
# writes them.
_LINE = (
    "{"
    + ", ".join(
        f"{json.dumps(name)}: {fmt}"
        for name, fmt in [
            *((name, _ITEM_FORMATS.get(name, "%s")) for name in ITEM_FIELDS),
            *((f.name, p[0]) for f, p in zip(EXPORTED_FIELDS, _PIECES, strict=True)),
        ]
    )
    + "}\n"
)
_result_values = attrgetter(*(p[1] for p in _PIECES))
_ENCODERS = tuple(p[2] for p in _PIECES)
_NO_RESULT = tuple(p[3] for p in _PIECES)


def jsonl_lines(page: Sequence[ResultRecord]) -> bytes:
    """A page of records as JSON lines. ``status`` (NOT NULL) skips the None check."""
    enc: Callable[[Any], str] = encode_basestring_ascii
    encoders = _ENCODERS
    lines = []
    for r in page:
        ref, code, message = r.ref, r.error_code, r.error_message
        head = (
            r.item_id,
            r.seq,
            "null" if ref is None else enc(ref),
            enc(r.status),
            "null" if code is None else enc(code),
            "null" if message is None else enc(message),
        )
        tail = tuple(map(call, encoders, _result_values(r))) if r.has_result else _NO_RESULT
        lines.append(_LINE % (*head, *tail))
    return "".join(lines).encode()


def jsonl_chunks(pages: Iterable[Sequence[ResultRecord]]) -> Iterator[bytes]:
    """The JSONL file of these pages, one chunk of lines per page."""
    for page in pages:
        if page:
            yield jsonl_lines(page)

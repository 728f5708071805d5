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
from vlbatch.db.results import ROW_AT, ResultRecord, stored_tags

__all__ = ["jsonl_chunks", "jsonl_lines", "jsonl_rows"]


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


# A page of rows (``vlbatch.db.results.RESULT_COLUMNS``, as an export reads them) is written a column at a time: each
# column's values turned into their texts by one call over the column, then every line formatted in one pass. The
# lines are ``jsonl_lines``'s of the rows' records byte for byte (``tests/jobs/exports/test_row_writers.py``).
def _strings(values: Sequence[str | None]) -> list[str]:
    """Strings as JSON (``null`` for None); a column of few distinct values (a status, a model) encodes each once."""
    distinct = set(values)
    if len(distinct) * 4 <= len(values):
        table = {v: "null" if v is None else encode_basestring_ascii(v) for v in distinct}
        return list(map(table.__getitem__, values))
    if None in distinct:
        return ["null" if v is None else encode_basestring_ascii(v) for v in values]
    return list(map(encode_basestring_ascii, values))  # type: ignore[arg-type]  # no None among them


def _json_texts(values: Sequence[str | None]) -> Sequence[str]:
    """Stored JSON texts as ``_json_text`` writes them, the whole column checked at once."""
    if None not in values:
        joined = "".join(values)  # type: ignore[arg-type]
        if joined.isascii() and "\n" not in joined and "\r" not in joined:
            return values  # type: ignore[return-value]  # no None among them
    return [_json_text(v) for v in values]


def _integers(values: Sequence[int | None], empty: Any) -> Sequence[Any]:
    if None not in values:
        return values
    return [empty if v is None else v for v in values]


def _column(f: ResultField, columns: Sequence[Sequence[Any]]) -> Sequence[Any]:
    """One exported field's texts (or ints, for ``%d``) for a page, without a result as ``_NO_RESULT`` has it."""
    # ``tags`` as the record's ``tags_json``: merged from the output for a result written before tags had sources
    values: Sequence[Any] = stored_tags(columns) if f.name == "tags" else columns[ROW_AT[str(f.read)]]
    if f.json:
        return _json_texts(values)
    if f.sql == "integer":
        return _integers(values, f.empty if f.empty is not None else "null")
    return _strings(values)


def jsonl_rows(rows: Sequence[Sequence[Any]]) -> bytes:
    """A page of rows (``RESULT_COLUMNS``) as JSON lines: the bytes ``jsonl_lines`` writes of their records."""
    if not rows:
        return b""
    columns = list(zip(*rows, strict=True))
    item_id, seq, ref, status, code, message = columns[: len(ITEM_FIELDS)]
    texts = [
        item_id,
        seq,
        _strings(ref),
        _strings(status),
        _strings(code),
        _strings(message),
        *(_column(f, columns) for f in EXPORTED_FIELDS),
    ]
    return "".join(map(_LINE.__mod__, zip(*texts, strict=True))).encode()

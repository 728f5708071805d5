r"""Results as CSV for spreadsheets: one row per finished item, tags (the model's merged with those edited by
hand) joined by ``;`` and the caption in columns of their own, the answer's JSON in ``output``, then the columns
the job's pipeline declares (``Pipeline.flat_columns``). The header is written before the first row, from the
columns alone: every row has every column, whatever its item is (a photo, a clip, a failure).

Cells a spreadsheet would run as a formula (starting with ``=``, ``+``, ``-``, ``@``, tab or CR) get a leading
``'``: a model's caption or a file name must not become a formula on the operator's machine.

The tags cell is guarded per tag, not only at its first character: a spreadsheet that opens the file with ``;``
as its separator (the default in many locales) splits the cell there, and each piece must still be no formula.
So within a tag ``\`` is written ``\\`` and ``;`` is written ``\;`` (a bare ``;`` only ever separates tags, and a
tag holding ``;`` reads back whole), and every piece that starts after a ``;`` or at the cell's start gets a
leading ``'`` when it starts with a formula character or with ``'`` itself. ``tags_of_cell`` reads it back
exactly.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Iterator, Sequence
from operator import attrgetter
from typing import Any

from jobs.exports.columns import FIXED, FlatColumns
from vlbatch.db.result_fields import FLAT
from vlbatch.db.results import ResultRecord

__all__ = ["csv_chunks", "csv_header", "csv_rows", "tags_cell", "tags_of_cell"]

_FORMULA = ("=", "+", "-", "@", "\t", "\r")
TAG_SEPARATOR = ";"


def _guarded_piece(piece: str) -> str:
    return "'" + piece if piece.startswith((*_FORMULA, "'")) else piece


def tags_cell(names: Sequence[str]) -> str:
    """Tag names as one CSV cell: escaped, guarded piece by piece, joined by ``;`` (module docstring)."""
    escaped = []
    for name in names:
        pieces = name.replace("\\", "\\\\").split(TAG_SEPARATOR)
        escaped.append("\\;".join(_guarded_piece(p) for p in pieces))
    return TAG_SEPARATOR.join(escaped)


def tags_of_cell(cell: str) -> list[str]:
    """The tag names ``tags_cell`` wrote, exactly; an empty cell has none."""
    if not cell:
        return []
    names: list[str] = []
    current: list[str] = []
    piece_start = True
    i = 0
    while i < len(cell):
        char = cell[i]
        if piece_start and char == "'":  # the guard: never part of the tag
            piece_start = False
            i += 1
            continue
        piece_start = False
        if char == "\\" and i + 1 < len(cell):
            current.append(cell[i + 1])
            piece_start = cell[i + 1] == TAG_SEPARATOR
            i += 2
            continue
        if char == TAG_SEPARATOR:
            names.append("".join(current))
            current, piece_start = [], True
        else:
            current.append(char)
        i += 1
    names.append("".join(current))
    return names


def _cell(value: Any) -> Any:
    if isinstance(value, str) and value.startswith(_FORMULA):
        return "'" + value
    return "" if value is None else value


def _lines(rows: Iterable[Sequence[Any]]) -> bytes:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\r\n")
    for row in rows:
        writer.writerow([_cell(v) for v in row])
    return buf.getvalue().encode("utf-8")


# The declaration's flat fields (``columns.FIXED``'s tail), blank for an item without a result.
_flat_values = attrgetter(*(str(f.read) for f in FLAT))
_NO_RESULT = (None,) * len(FLAT)


def csv_header(flat: FlatColumns | None = None) -> bytes:
    return _lines([(*FIXED, *(flat.names if flat else ()))])


def csv_rows(page: Sequence[ResultRecord], flat: FlatColumns | None = None) -> bytes:
    """A page of records as CSV lines (no header)."""
    rows = []
    for r in page:
        names = r.tag_names
        row = [
            r.item_id,
            r.seq,
            r.ref,
            r.status,
            r.error_code,
            r.error_message,
            tags_cell(names) if names is not None else None,
            r.caption,
            r.output_text,
            *(_flat_values(r) if r.has_result else _NO_RESULT),
        ]
        if flat is not None:
            row.extend(flat.values(r))
        rows.append(row)
    return _lines(rows)


def csv_chunks(pages: Iterable[Sequence[ResultRecord]], flat: FlatColumns | None = None) -> Iterator[bytes]:
    """The CSV file of these pages: the header, then one chunk of rows per page."""
    yield csv_header(flat)
    for page in pages:
        if page:
            yield csv_rows(page, flat)

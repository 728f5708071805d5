"""Results as CSV for spreadsheets: one row per finished item, tags and caption in columns of their own.

Cells a spreadsheet would run as a formula (starting with ``=``, ``+``, ``-``, ``@``, tab or CR) get a leading
``'``: a model's caption or a file name must not become a formula on the operator's machine.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from typing import Any

__all__ = ["HEADER", "csv_rows"]

HEADER = (
    "item_id",
    "seq",
    "ref",
    "status",
    "error_code",
    "error_message",
    "tags",
    "caption",
    "output",
    "prompt_tokens",
    "completion_tokens",
    "model",
    "pipeline_version",
    "options_hash",
)
_FORMULA = ("=", "+", "-", "@", "\t", "\r")


def _cell(value: Any) -> Any:
    if isinstance(value, str) and value.startswith(_FORMULA):
        return "'" + value
    return "" if value is None else value


def csv_rows(page: Sequence[tuple[Any, ...]], *, header: bool) -> bytes:
    """A page of ``crud.RESULT_COLUMNS`` tuples as CSV lines (with the header line first when asked)."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\r\n")
    if header:
        writer.writerow(HEADER)
    for item_id, seq, ref, status, code, message, _, output, _raw, p_tok, c_tok, model, version, opts in page:
        decoded = json.loads(output) if output else None
        tags = decoded.get("tags") if isinstance(decoded, dict) else None
        caption = decoded.get("caption") if isinstance(decoded, dict) else None
        tag_text = ";".join(t for t in tags if isinstance(t, str)) if isinstance(tags, list) else None
        row = (item_id, seq, ref, status, code, message, tag_text, caption, output, p_tok, c_tok, model, version, opts)
        writer.writerow([_cell(v) for v in row])
    return buf.getvalue().encode("utf-8")

"""Results as CSV for spreadsheets: one row per finished item, tags (the model's merged with those edited by
hand) and caption in columns of their own.

Cells a spreadsheet would run as a formula (starting with ``=``, ``+``, ``-``, ``@``, tab or CR) get a leading
``'``: a model's caption or a file name must not become a formula on the operator's machine.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from typing import Any

from vlbatch.db.tags import model_tags, tag_names

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
    for item_id, seq, ref, status, code, message, _, output, _raw, p_tok, c_tok, model, version, opts, tags in page:
        decoded = json.loads(output) if output else None
        caption = decoded.get("caption") if isinstance(decoded, dict) else None
        merged = json.loads(tags) if tags else None
        names = tag_names(merged, decoded) if merged is not None or model_tags(decoded) is not None else None
        tag_text = ";".join(names) if names is not None else None
        row = (item_id, seq, ref, status, code, message, tag_text, caption, output, p_tok, c_tok, model, version, opts)
        writer.writerow([_cell(v) for v in row])
    return buf.getvalue().encode("utf-8")

"""Strings a request may not carry: NUL (PostgreSQL text and file paths refuse it) and lone UTF-16 surrogates
(no UTF-8 encoding exists, so storing or answering them fails). Found here, they are a 422 up front instead of
a 500 from the driver, the file system or the JSON encoder later."""

from __future__ import annotations

from starlette.requests import Request

from vlbatch.errors import INVALID_REQUEST, VlbatchError
from vlbatch.text import printable, text_fault

__all__ = ["printable", "refuse_bad_url_text", "text_fault"]


def refuse_bad_url_text(request: Request) -> None:
    """A dependency of every route: path segments and query values decoded from ``%00`` hold NUL, which a lookup
    by that value would hand to the database."""
    params = {f"path {k}": v for k, v in request.path_params.items()}
    params.update({f"query {k}": v for k, v in request.query_params.multi_items()})
    for where, value in params.items():
        if isinstance(value, str) and (fault := text_fault(value, where)) is not None:
            raise VlbatchError(fault, code=INVALID_REQUEST)

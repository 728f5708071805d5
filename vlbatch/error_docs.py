"""The docs' table of error codes (docs/error-codes.md), generated from the registry in :mod:`vlbatch.errors`.

``python -m vlbatch.error_docs`` prints the table; ``--readme docs/error-codes.md`` rewrites it between the markers
there (``python -m cli.docs_pages`` rewrites every generated page). ``tests/test_errors.py`` fails when the page's
table and the registry differ.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from vlbatch.errors import CODES, USES

README_START = "<!-- error-codes:start -->"
README_END = "<!-- error-codes:end -->"


def markdown_table() -> str:
    """Every code as one row of a Markdown table, in registry order."""
    lines = ["| Code | Meaning | Retryable | HTTP | Where |", "| --- | --- | --- | --- | --- |"]
    for e in CODES.values():
        where = ", ".join(u for u in USES if u in e.used_in)
        lines.append(f"| `{e.code}` | {e.meaning} | {'yes' if e.retryable else 'no'} | {e.http_status} | {where} |")
    return "\n".join(lines) + "\n"


def between_markers(page: str, start: str, end: str, body: str) -> str:
    """``page`` with the text between its ``start`` and ``end`` markers replaced by ``body`` (a generated part of a
    hand-written page); ValueError when a marker is missing."""
    head, found_start, rest = page.partition(start)
    _, found_end, tail = rest.partition(end)
    if not found_start or not found_end:
        raise ValueError(f"the page lacks the markers {start} ... {end}")
    return f"{head}{start}\n{body}{end}{tail}"


def with_table(readme: str) -> str:
    """``readme`` with the text between the error-code markers replaced by :func:`markdown_table`."""
    return between_markers(readme, README_START, README_END, markdown_table())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m vlbatch.error_docs", description="The table of vlbatch's error codes."
    )
    parser.add_argument("--readme", type=Path, help="rewrite the table between the markers in this file")
    args = parser.parse_args(argv)
    if args.readme is None:
        print(markdown_table(), end="")
    else:
        args.readme.write_text(with_table(args.readme.read_text(encoding="utf-8")), encoding="utf-8")


if __name__ == "__main__":
    main()

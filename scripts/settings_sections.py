"""Rewrite flat settings reads into section reads: ``settings.chunk_size`` -> ``settings.scheduling.chunk_size``.

    python scripts/settings_sections.py                 # rewrite the product's packages in place
    python scripts/settings_sections.py --check         # list the flat reads left; exit 1 if there is one
    python scripts/settings_sections.py tests/worker    # other files or directories (tests, a branch's new code)

Where each name went comes from ``vlbatch.settings.FLAT_NAMES`` (and ``FLAT_MEMBERS`` for ``quota()`` and
``served_model_name``). A read is rewritten when what it reads from is a settings object by its spelling:

* a name ending in ``settings`` (``settings``, ``run_settings``), or any name the same file binds to one
  (``s: Settings``, ``s = get_settings()``, ``cfg = Settings(...)``, ``s = settings.model_copy(...)``);
* an attribute ending in ``settings`` (``self.settings``, ``ctx.settings``, ``app.state.settings``);
* a call of ``Settings(...)``, ``get_settings()``, any function whose name ends in ``settings`` or any function
  the scanned files declare to return ``Settings`` (``engine_for_host(...)``), and ``.model_copy(...)`` of these.

Only the text between a receiver and its attribute changes (the section is inserted), so comments and layout stay;
a line may grow past the formatter's width (run ``ruff format`` after). Running it twice changes nothing: a section
read (``settings.scheduling.chunk_size``) reads from ``settings.scheduling``, which is no settings object. A read
through a name it cannot tell (a parameter typed by a protocol, ``getattr``) is left for mypy, which reports it.
"""

from __future__ import annotations

import argparse
import ast
import functools
import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vlbatch.settings import FLAT_MEMBERS, FLAT_NAMES  # noqa: E402

PRODUCT = (
    "cli",
    "api",
    "worker",
    "jobs",
    "engine",
    "kernels",
    "pipelines",
    "preprocessing",
    "vlbatch",
    "benchmarks",
    "scripts",
)
SECTION_OF: dict[str, str] = {**{name: where[0] for name, where in FLAT_NAMES.items()}, **FLAT_MEMBERS}
# The settings package itself defines the sections and reads them by field, not through a settings object.
SKIP = ("vlbatch/settings/",)
_SETTINGS_NAME = re.compile(r"(^|_)settings$", re.IGNORECASE)
_SETTINGS_CALLS = {"Settings", "get_settings"}


@dataclass(frozen=True)
class FlatRead:
    path: Path
    line: int
    receiver: str
    name: str

    def __str__(self) -> str:
        read = f"{self.receiver}.{self.name}"
        return f"{self.path}:{self.line}: {read} -> {self.receiver}.{SECTION_OF[self.name]}.{self.name}"


def _callee(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _is_settings_type(annotation: ast.expr | None) -> bool:
    return annotation is not None and re.search(r"\bSettings\b", ast.unparse(annotation)) is not None


class _Receivers:
    """Which expressions of one file are settings objects, by their spelling and the file's own bindings."""

    def __init__(self, tree: ast.Module, makers: frozenset[str] = frozenset()) -> None:
        self.makers = makers
        self.names: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.arg) and _is_settings_type(node.annotation):
                self.names.add(node.arg)
            elif (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and _is_settings_type(node.annotation)
            ):
                self.names.add(node.target.id)
        # Plain assignments may chain (s = get_settings(); t = s.model_copy(...)): repeat until nothing is added.
        assigns = [n for n in ast.walk(tree) if isinstance(n, ast.Assign)]
        while True:
            before = len(self.names)
            for node in assigns:
                if self.is_settings(node.value):
                    self.names.update(t.id for t in node.targets if isinstance(t, ast.Name))
            if len(self.names) == before:
                break

    def is_settings(self, node: ast.expr) -> bool:
        if isinstance(node, ast.Name):
            return node.id in self.names or _SETTINGS_NAME.search(node.id) is not None
        if isinstance(node, ast.Attribute):
            return _SETTINGS_NAME.search(node.attr) is not None
        if isinstance(node, ast.Call):
            name = _callee(node.func)
            if name in _SETTINGS_CALLS or name in self.makers:
                return True
            if name is not None and _SETTINGS_NAME.search(name) is not None:
                return True
            if isinstance(node.func, ast.Attribute) and node.func.attr == "model_copy":
                return self.is_settings(node.func.value)
        return False


def settings_makers(tree: ast.Module) -> set[str]:
    """The functions and methods of ``tree`` declared to return a ``Settings``."""
    return {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and _is_settings_type(node.returns)
    }


def flat_reads(tree: ast.Module, makers: frozenset[str] = frozenset()) -> Iterator[ast.Attribute]:
    """The attribute reads of ``tree`` that read a setting flat from a settings object."""
    receivers = _Receivers(tree, makers)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in SECTION_OF and receivers.is_settings(node.value):
            yield node


def rewrite(source: str, makers: frozenset[str] = frozenset()) -> tuple[str, list[tuple[int, str, str]]]:
    """``source`` with every flat read given its section, and the reads changed (line, receiver, name)."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    # The section goes just before the attribute's name (``settings.`` + ``scheduling.`` + ``chunk_size``), which
    # ends the node: that holds across parentheses and line breaks between the receiver and the dot.
    found = sorted(flat_reads(tree, makers), key=lambda n: (n.end_lineno or 0, n.end_col_offset or 0))
    changed = [(n.lineno, ast.unparse(n.value), n.attr) for n in found]
    # Insert from the end so earlier offsets stay valid; ast offsets count UTF-8 bytes (a name is ASCII).
    for node in reversed(found):
        row = (node.end_lineno or 0) - 1
        col = (node.end_col_offset or 0) - len(node.attr)
        raw = lines[row].encode()
        lines[row] = (raw[:col] + f"{SECTION_OF[node.attr]}.".encode() + raw[col:]).decode()
    return "".join(lines), changed


def _parse(file: Path) -> ast.Module:
    return ast.parse(file.read_text(encoding="utf-8"))


@functools.cache
def _product_makers() -> frozenset[str]:
    """The product's functions returning a Settings: the files scanned (tests, a branch's code) call them too."""
    return frozenset(name for file in python_files(ROOT / p for p in PRODUCT) for name in settings_makers(_parse(file)))


def python_files(paths: Iterable[Path]) -> Iterator[Path]:
    for path in paths:
        files = [path] if path.is_file() else sorted(path.rglob("*.py"))
        for file in files:
            rel = file.resolve().relative_to(ROOT).as_posix() if file.resolve().is_relative_to(ROOT) else str(file)
            if file.suffix == ".py" and not rel.startswith(SKIP) and ".venv" not in file.parts:
                yield file


def scan(paths: Iterable[Path], *, write: bool) -> list[FlatRead]:
    """Every flat read under ``paths``; with ``write`` each file is rewritten in place."""
    files = list(python_files(paths))
    makers = _product_makers() | {name for file in files for name in settings_makers(_parse(file))}
    reads: list[FlatRead] = []
    for file in files:
        source = file.read_text(encoding="utf-8")
        if not any(name in source for name in SECTION_OF):
            continue
        new, changed = rewrite(source, makers)
        reads += [FlatRead(file, line, receiver, name) for line, receiver, name in changed]
        if write and new != source:
            file.write_text(new, encoding="utf-8")
    return reads


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("paths", nargs="*", type=Path, help="files or directories (default: the product's packages)")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a flat read is left")
    args = parser.parse_args(argv)
    paths = args.paths or [ROOT / p for p in PRODUCT]
    reads = scan(paths, write=not args.check)
    for read in reads:
        print(read)
    if args.check:
        print(f"{len(reads)} flat settings read(s)" + (": run scripts/settings_sections.py" if reads else ""))
        return 1 if reads else 0
    print(f"rewrote {len(reads)} flat settings read(s) in {len({r.path for r in reads})} file(s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

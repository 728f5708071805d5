"""The error root and the registry of codes: every exception is a VlbatchError, every code the source uses is
registered and every registered code is used (both read from the source with ``ast``), errors pickle, the
docs' table (docs/error-codes.md) is the registry's, and the CLI ends on a VlbatchError with one line instead of a
traceback."""

from __future__ import annotations

import ast
import builtins
import importlib
import pickle
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from api.http_errors import JobNotFound, RequestRefused
from engine.platforms.cuda import NvidiaSmiNotFound
from engine.platforms.npu_smi import NpuSmiError, NpuSmiNotFound
from engine.runtime.requests import EngineCrashed
from pipelines.documents_common import ParseError
from pipelines.extract import SchemaError
from preprocessing.input_errors import InputError
from vlbatch import error_codes, error_docs, errors
from vlbatch.errors import CODES, VlbatchError, lookup

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("cli", "benchmarks", "api", "worker", "jobs", "engine", "kernels", "pipelines", "preprocessing", "vlbatch")
# The registry itself: the root and its re-exports, and the code definitions by area.
REGISTRY = {ROOT / "vlbatch" / "errors.py", *(ROOT / "vlbatch" / "error_codes").glob("*.py")}
# Exceptions whose first positional argument is the code.
CODE_FIRST = {"InputError", "RequestRefused"}
CODE_NAMES = {"code", "error_code"}
# Constant name -> code, as vlbatch.errors defines them.
CONSTANTS = {name: v for name, v in vars(errors).items() if name.isupper() and isinstance(v, str) and v in CODES}


def _sources() -> Iterator[tuple[str, ast.Module]]:
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            if path not in REGISTRY:
                rel = path.relative_to(ROOT).as_posix()
                yield rel, ast.parse(path.read_text(encoding="utf-8"), filename=rel)


def _name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _strings(node: ast.expr) -> list[str]:
    """String constants an expression can evaluate to (a literal, either arm of ``a if c else b``)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.IfExp):
        return _strings(node.body) + _strings(node.orelse)
    return []


def code_literals(tree: ast.Module) -> Iterator[tuple[int, str]]:
    """(line, code) of every error code written as a literal: ``code="..."`` / ``error_code="..."`` keywords,
    the first argument of ``InputError``/``RequestRefused``, the error code of a positional ``Outcome(...)``,
    a ``code = ...`` assignment (a class's default or a local), a ``("fail", item, code, message)`` event and
    an ``error = (code, message)`` pair."""
    for node in ast.walk(tree):
        found: list[ast.expr] = []
        if isinstance(node, ast.Call):
            found += [kw.value for kw in node.keywords if kw.arg in CODE_NAMES]
            callee = _name(node.func)
            if callee in CODE_FIRST and node.args:
                found.append(node.args[0])
            if callee == "Outcome" and len(node.args) > 6:
                found.append(node.args[6])
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = {_name(t) for t in targets}
            if node.value is not None and names & CODE_NAMES:
                found.append(node.value)
            if node.value is not None and "error" in names and isinstance(node.value, ast.Tuple):
                found.append(node.value.elts[0])
        elif isinstance(node, ast.Tuple) and len(node.elts) > 2 and _strings(node.elts[0]) == ["fail"]:
            found.append(node.elts[2])
        for expr in found:
            yield from ((expr.lineno, s) for s in _strings(expr))


def constants_used(tree: ast.Module) -> set[str]:
    """Codes whose ``vlbatch.errors`` constant the module imports and then uses (or uses as ``errors.X``)."""
    imported: dict[str, str] = {}
    modules: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "vlbatch.errors":
            imported |= {a.asname or a.name: a.name for a in node.names if a.name in CONSTANTS}
        elif isinstance(node, ast.ImportFrom) and node.module == "vlbatch":
            modules |= {a.asname or a.name for a in node.names if a.name == "errors"}
    used = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in imported:
            used.add(CONSTANTS[imported[node.id]])
        elif isinstance(node, ast.Attribute) and _name(node.value) in modules and node.attr in CONSTANTS:
            used.add(CONSTANTS[node.attr])
    return used


def test_the_walker_finds_each_form_of_code_literal() -> None:
    tree = ast.parse(
        'raise InputError("a", "m")\nraise ParseError("m", code="b")\nOutcome(1, "j", None, None, 0, 0, "c", "m")\n'
        'class E(VlbatchError):\n    code = "d"\ncode = "e" if x else "f"\nq.put(("fail", held, "g", "m"))\n'
        'error = ("h", str(exc))\nOutcome(item_id=1, error_code="i")\nraise RequestRefused("j", "m")\n'
        'typer.Exit(code=2)\nlog("fail", "not", "a code")\n'
    )
    assert sorted(code for _, code in code_literals(tree)) == list("abcdefghij")


def test_every_code_literal_in_the_source_is_registered() -> None:
    unknown = [f"{rel}:{line} {code!r}" for rel, tree in _sources() for line, code in code_literals(tree)]
    unknown = [u for u in unknown if u.rsplit(" ", 1)[1].strip("'") not in CODES]
    hint = "register these codes in their area's module of vlbatch/error_codes/, re-export them from vlbatch/errors.py"
    assert not unknown, f"{hint} (or fix the typo):\n" + "\n".join(unknown)


def test_every_registered_code_is_used_somewhere() -> None:
    used: set[str] = set()
    for _, tree in _sources():
        used |= {code for _, code in code_literals(tree)} | constants_used(tree)
    assert not set(CODES) - used, f"codes nothing raises or stores (drop them): {sorted(set(CODES) - used)}"


def test_every_exception_class_of_the_project_is_a_vlbatch_error() -> None:
    bases: dict[str, set[str]] = {}
    where: dict[str, str] = {}
    for rel, tree in _sources():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                bases.setdefault(node.name, set()).update(n for b in node.bases if (n := _name(b)))
                where[node.name] = f"{rel}:{node.lineno}"
    builtin_errors = {n for n, v in vars(builtins).items() if isinstance(v, type) and issubclass(v, BaseException)}

    def reaches(name: str, targets: set[str], seen: frozenset[str] = frozenset()) -> bool:
        return any(b in targets or (b not in seen and reaches(b, targets, seen | {name})) for b in bases.get(name, ()))

    exceptions = {n for n in bases if reaches(n, builtin_errors | {"VlbatchError"})}
    assert {"InputError", "EngineCrashed", "QuantizeError", "NothingToDo", "PlanError"} <= exceptions
    stray = sorted(where[n] + " " + n for n in exceptions - {"VlbatchError"} if not reaches(n, {"VlbatchError"}))
    assert not stray, "derive these from vlbatch.errors.VlbatchError:\n" + "\n".join(stray)


def test_the_registry_entries_are_complete_and_fit_the_items_column() -> None:
    assert CODES
    for code, e in CODES.items():
        assert e.code == code and code.isidentifier() and code == code.lower() and len(code) <= 64  # String(64)
        assert 400 <= e.http_status <= 599 and e.used_in and e.used_in <= set(errors.USES)
        assert e.meaning.endswith(".") and "|" not in e.meaning
    assert len(set(CONSTANTS.values())) == len(CODES), "one constant per code"


def test_every_area_module_is_listed_in_registration_order_and_re_exported_by_errors() -> None:
    modules = {p.stem for p in (ROOT / "vlbatch" / "error_codes").glob("*.py")} - {"__init__", "registry"}
    assert sorted(error_codes.AREAS) == sorted(modules), "list each area module in vlbatch.error_codes.AREAS"
    order: list[str] = []
    for area in error_codes.AREAS:
        defined = {
            name: value
            for name, value in vars(importlib.import_module(f"vlbatch.error_codes.{area}")).items()
            if name.isupper() and isinstance(value, str)
        }
        missing = sorted(n for n, v in defined.items() if getattr(errors, n, None) != v or n not in errors.__all__)
        assert not missing, f"re-export these from vlbatch/errors.py (import and __all__): {missing}"
        order += defined.values()
    assert order == list(CODES)


def test_the_registry_order_does_not_depend_on_which_area_is_imported_first() -> None:
    code = "import vlbatch.error_codes.tools, vlbatch.error_codes.jobs; from vlbatch.errors import CODES; print(*CODES)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert proc.stdout.split() == list(CODES)


def test_an_unknown_code_fails_loudly_at_raise_and_at_class_definition() -> None:
    assert lookup("decode_error").http_status == 422
    with pytest.raises(KeyError, match=r"unknown error code 'decod_error'.*decode_error"):
        lookup("decod_error")
    with pytest.raises(KeyError, match="'no_such_code'"):
        InputError("no_such_code", "x")
    with pytest.raises(KeyError, match="'no_such_default'"):
        type("Bad", (VlbatchError,), {"code": "no_such_default"})


def test_codes_come_from_the_class_or_the_raise() -> None:
    assert ParseError("m").code == "parse_error" and ParseError("m", code="output_truncated").code == "output_truncated"
    assert SchemaError("m").code == "invalid_schema" and isinstance(SchemaError("m"), ValueError)  # for pydantic
    assert NpuSmiNotFound("m").code == NvidiaSmiNotFound("m").code == "device_tool_missing"
    assert NpuSmiError("m").code == "device_discovery_failed"
    exc = InputError("decode_error", "not a JPEG")
    assert (exc.code, exc.message, str(exc)) == ("decode_error", "not a JPEG", "decode_error: not a JPEG")


@pytest.mark.parametrize(
    "exc",
    [
        InputError("too_large", "a.jpg is 9 bytes, limit 8"),
        EngineCrashed("engine died", generation=3, in_flight=1),
        ParseError("cut off", code="output_truncated"),
        JobNotFound("j-1"),
        RequestRefused("bad_cursor", "bad cursor 'x'"),
    ],
)
def test_errors_survive_pickling_across_processes(exc: VlbatchError) -> None:
    back = pickle.loads(pickle.dumps(exc))
    assert type(back) is type(exc) and vars(back) == vars(exc) and str(back) == str(exc) and back.args == exc.args


def test_the_docs_table_is_the_registrys() -> None:
    page = (ROOT / "docs" / "error-codes.md").read_text(encoding="utf-8")
    assert page.startswith("# Error codes\n")
    body = page.split(error_docs.README_START, 1)[1].split(error_docs.README_END, 1)[0]
    assert body == "\n" + error_docs.markdown_table(), "run: python -m cli.docs_pages"
    assert error_docs.with_table(page) == page


def test_the_table_has_one_row_per_code_and_prints_from_the_command_line(tmp_path: Path) -> None:
    table = error_docs.markdown_table()
    rows = table.splitlines()[2:]
    assert [r.split("`")[1] for r in rows] == list(CODES)
    assert "| `fetch_error` | " in table and "| yes | 502 | item |" in table
    proc = subprocess.run([sys.executable, "-m", "vlbatch.error_docs"], capture_output=True, text=True, check=True)
    assert proc.stdout == table
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n{error_docs.README_START}\nstale\n{error_docs.README_END}\n\nafter\n")
    error_docs.main(["--readme", str(readme)])
    assert readme.read_text() == f"# x\n\n{error_docs.README_START}\n{table}{error_docs.README_END}\n\nafter\n"
    with pytest.raises(ValueError, match="markers"):
        error_docs.with_table("# no markers\n")


def test_the_cli_ends_on_a_vlbatch_error_with_its_code_and_no_traceback(tmp_path: Path) -> None:
    empty, model = tmp_path / "photos", tmp_path / "model"
    empty.mkdir()
    model.mkdir()
    proc = subprocess.run(
        [sys.executable, "-c", "from cli.main import main; main()", "tag", str(empty), "--model", str(model)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == f"error no_inputs: no image files under {empty}"
    assert "Traceback" not in proc.stderr

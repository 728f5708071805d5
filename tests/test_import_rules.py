"""Layering rules checked on the source with ``ast``, so importing a package never touches a device:

* no project module imports torch, torch_npu, vllm or vllm_ascend at module top (inside a function is fine)
  outside ``engine/platforms/`` and the kernel device modules;
* nothing outside ``engine/platforms/`` compares platform names: it asks the platform;
* ``import cli.main`` loads no pipeline, worker, engine or model library: each command imports what it runs;
* no module outside ``vlbatch/db/`` (benchmarks aside) imports SQLAlchemy's statement builders: the store builds SQL;
* no module imports another package's private names, and no route module imports another route module (what
  routes share lives beside them: ``api.params``, ``api.job_views``);
* nothing reads the process environment but ``vlbatch.settings`` (through pydantic-settings) and, for the
  children the benchmarks start, ``benchmarks/harness/children.py``.

Which package may import which is checked by ``lint-imports`` (the contracts in pyproject.toml).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("cli", "benchmarks", "api", "worker", "jobs", "engine", "kernels", "pipelines", "preprocessing", "vlbatch")
VENDOR = {"torch", "torch_npu", "vllm", "vllm_ascend"}
PLATFORMS = ROOT / "engine" / "platforms"
# The kernel device module: torch at top, torch_npu inside each function (kernels/__init__.py says so).
KERNEL_DEVICE_MODULES = {"kernels/npu.py"}
# Reference math in plain torch (run anywhere, CPU included): torch at top by design, and only torch. Listed one by
# one so that a new module does not slip in; torch_npu, vllm and vllm_ascend stay banned at their top too.
KERNEL_TORCH_MODULES = {
    "kernels/nz.py",
    "kernels/parity.py",
    "kernels/smooth.py",
    "kernels/w8a8.py",
    "kernels/quantize/calibrate.py",
    "kernels/quantize/evaluate.py",
    "kernels/quantize/export.py",
    "kernels/quantize/layers.py",
}
PLATFORM_NAMES = {"ascend-310p", "ascend-910b", "cuda", "cpu"}
# The environment is read through the one typed Settings; a benchmark copies it for the processes it starts here.
ENVIRONMENT_READERS = {"benchmarks/harness/children.py"}
OS_ENVIRONMENT = {"environ", "environb", "getenv", "getenvb"}


def _sources() -> Iterator[tuple[str, ast.Module]]:
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            yield rel, ast.parse(path.read_text(encoding="utf-8"), filename=rel)


def _type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"
    )


def top_level_imports(tree: ast.Module) -> Iterator[tuple[int, str]]:
    """(line, top package) of every import that runs when the module is imported: module body, class bodies,
    if/try/with blocks; not function bodies, and not ``if TYPE_CHECKING:``."""
    stack: list[ast.stmt] = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            if node.module and node.level == 0:
                yield node.lineno, node.module.split(".")[0]
        elif isinstance(node, ast.If):
            if not _type_checking(node):
                stack += node.body
            stack += node.orelse
        elif isinstance(node, ast.Try):
            stack += node.body + node.orelse + node.finalbody
            for h in node.handlers:
                stack += h.body
        elif isinstance(node, ast.ClassDef | ast.With | ast.For | ast.While):
            stack += node.body
            stack += getattr(node, "orelse", [])


def test_the_walker_sees_what_runs_at_import() -> None:
    tree = ast.parse(
        "import os\nimport torch.nn\nfrom vllm import LLM\nif TYPE_CHECKING:\n    import torch_npu\n"
        "try:\n    import vllm_ascend\nexcept ImportError:\n    pass\nclass A:\n    import torch\n"
        "def f():\n    import vllm\n"
    )
    assert sorted(top_level_imports(tree)) == [(1, "os"), (2, "torch"), (3, "vllm"), (7, "vllm_ascend"), (11, "torch")]


def test_no_vendor_sdk_is_imported_at_module_top() -> None:
    bad = []
    for rel, tree in _sources():
        if (ROOT / rel).is_relative_to(PLATFORMS):
            continue
        allowed = {"torch"} if rel in KERNEL_DEVICE_MODULES | KERNEL_TORCH_MODULES else set()
        bad += [f"{rel}:{line} imports {mod}" for line, mod in top_level_imports(tree) if mod in VENDOR - allowed]
    assert not bad, "import these inside the function that needs them (or in engine/platforms/):\n" + "\n".join(bad)


def test_the_kernel_allow_list_names_existing_modules() -> None:
    for rel in KERNEL_DEVICE_MODULES | KERNEL_TORCH_MODULES:
        assert (ROOT / rel).is_file(), rel


def test_no_platform_name_comparisons_outside_the_platforms() -> None:
    bad = []
    for rel, tree in _sources():
        if (ROOT / rel).is_relative_to(PLATFORMS):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare):
                consts = [n for n in (node.left, *node.comparators) if isinstance(n, ast.Constant)]
                if any(c.value in PLATFORM_NAMES for c in consts if isinstance(c.value, str)):
                    bad.append(f"{rel}:{node.lineno}")
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "startswith"
                and any(isinstance(a, ast.Constant) and a.value == "ascend" for a in node.args)
            ):
                bad.append(f"{rel}:{node.lineno}")
    assert not bad, "ask the platform (engine.platforms) instead of comparing its name:\n" + "\n".join(bad)


def test_importing_the_cli_loads_none_of_what_its_commands_run() -> None:
    heavy = {"api", "worker", "engine", "kernels", "pipelines", "preprocessing", "celery", "torch", "vllm"}
    code = f"import sys, cli.main; print(*sorted({{m.split('.')[0] for m in sys.modules}} & {heavy!r}))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert proc.stdout.split() == [], f"import cli.main loaded {proc.stdout.strip()}: import it inside the command"


def environment_reads(tree: ast.Module) -> Iterator[int]:
    """Lines that read the process environment: ``os.environ``, ``os.getenv`` and their bytes forms, as attributes
    of ``os`` or imported from it. Setting a variable for a library and the processes it starts
    (``os.environ["X"] = v``) reads nothing."""
    writes = {
        id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store)
    }
    for node in ast.walk(tree):
        if id(node) in writes:
            continue
        if isinstance(node, ast.Attribute) and node.attr in OS_ENVIRONMENT and ast.unparse(node.value) == "os":
            yield node.lineno
        elif isinstance(node, ast.ImportFrom) and node.module == "os":
            yield from (node.lineno for alias in node.names if alias.name in OS_ENVIRONMENT)


def test_the_environment_walker_sees_every_form() -> None:
    tree = ast.parse(
        "import os\nos.environ.get('A')\nos.getenv('B')\nfrom os import environ\nenv = {**os.environ}\n"
        "settings.environ\nos.path.join('a')\nos.environ['C'] = '1'\n"
    )
    assert sorted(environment_reads(tree)) == [2, 3, 4, 5]


def test_only_the_settings_and_the_benchmarks_child_env_read_the_environment() -> None:
    bad = []
    for rel, tree in _sources():
        if rel not in ENVIRONMENT_READERS:
            bad += [f"{rel}:{line}" for line in environment_reads(tree)]
    hint = "take it from vlbatch.settings.Settings (a benchmark's child: benchmarks.harness.children.child_env)"
    assert not bad, hint + ":\n" + "\n".join(bad)
    for rel in ENVIRONMENT_READERS:
        assert list(environment_reads(ast.parse((ROOT / rel).read_text()))), f"{rel} no longer reads it: drop it"


# SQLAlchemy's statement builders (select, insert, func, the dialects' inserts...) belong to the store: outside
# vlbatch/db/ a module asks a store function. Sessions, engines and errors (sqlalchemy.orm, .engine, .exc) travel.
SQL_OUTSIDE_STORE_ALLOWED = ("sqlalchemy.orm", "sqlalchemy.engine", "sqlalchemy.exc")
STORE = ("vlbatch/db/", "vlbatch/migrations/")


def sql_builder_imports(tree: ast.Module) -> Iterator[tuple[int, str]]:
    """(line, module) of every import, anywhere in the module, of SQLAlchemy other than its sessions, engines and
    errors."""
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        for name in names:
            if name.split(".")[0] == "sqlalchemy" and not name.startswith(SQL_OUTSIDE_STORE_ALLOWED):
                yield node.lineno, name


def test_the_sql_walker_sees_every_form() -> None:
    tree = ast.parse(
        "from sqlalchemy import select\nimport sqlalchemy\nfrom sqlalchemy.orm import Session\n"
        "def f():\n    from sqlalchemy.dialects import postgresql\nfrom sqlalchemy.exc import IntegrityError\n"
    )
    assert sorted(sql_builder_imports(tree)) == [(1, "sqlalchemy"), (2, "sqlalchemy"), (5, "sqlalchemy.dialects")]


def test_no_sql_is_built_outside_the_store() -> None:
    bad = [
        f"{rel}:{line} {name}"
        for rel, tree in _sources()
        if not rel.startswith(STORE) and not rel.startswith("benchmarks/")
        for line, name in sql_builder_imports(tree)
    ]
    assert not bad, "build the statement in a vlbatch/db store module and call it:\n" + "\n".join(bad)


def private_imports(tree: ast.Module, module: str) -> Iterator[tuple[int, str]]:
    """(line, ``module.name``) of every private name ``module`` imports from a project module outside its own
    package (a package's modules may share their helpers; another package's are not theirs to reach)."""
    package = module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] not in PACKAGES or node.module.rpartition(".")[0] == package:
                continue
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    yield node.lineno, f"{node.module}.{alias.name}"


def test_the_private_import_walker_sees_every_form() -> None:
    source = "from jobs.actions import _cursor, found\nfrom api.other import _x\ndef f():\n    from jobs.a import _y\n"
    assert sorted(private_imports(ast.parse(source), "api.routes.results")) == [
        (1, "jobs.actions._cursor"),
        (2, "api.other._x"),
        (4, "jobs.a._y"),
    ]
    assert not list(
        private_imports(ast.parse("from vlbatch.error_codes.registry import _define"), "vlbatch.error_codes.jobs")
    )


def test_no_module_reaches_into_another_package_for_private_names() -> None:
    bad = [
        f"{rel}:{line} {name}"
        for rel, tree in _sources()
        for line, name in private_imports(tree, rel.removesuffix(".py").replace("/", "."))
    ]
    assert not bad, "make the name public in a module both may import (e.g. api/params.py):\n" + "\n".join(bad)


def test_route_modules_import_no_other_route_module() -> None:
    """A route module is an adapter over the service and the store; what two of them share lives beside them in
    ``api`` (``api.params``, ``api.job_views``), not in one of them."""
    bad = [
        f"{rel}:{line} {name}"
        for rel, tree in _sources()
        if rel.startswith("api/routes/")
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("api.routes")
        for line, name in [(node.lineno, node.module)]
    ]
    assert not bad, "\n".join(bad)

"""The design docs stand alone and stay true to the code.

* Every relative link in README.md and docs/*.md names a file of this repository. No link climbs out of its folder
  (``../``), starts at the filesystem root, or leaves for another site.
* Every repository path the docs quote in backticks (``worker/feeder.py``) exists. Every ``path.py::Name``
  reference names a function, class, method or constant defined in that file.
* Every ``vlbatch <command>`` in a code span or block of docs/*.md is a command of the Typer app in
  ``cli/main.py``, and so is each subcommand and ``--option`` given with it.

The checkers run on the real pages, and on small made-up pages that break each rule, so a checker that finds
nothing fails too.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer.main

from cli.main import app

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [ROOT / "README.md", *DOCS]

FENCE = re.compile(r"^(`{3,}|~{3,})[^\n]*\n(.*?)^\1[ \t]*$", re.M | re.S)
SPAN = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"!?\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
REFERENCE = re.compile(r"^([\w./@-]+\.py)::([A-Za-z_][\w.]*)$")
REPO_PATH = re.compile(r"^[\w.@-]+(?:/[\w.@-]+)*/?$")
# A command word is lower case: `CREATE ROLE vlbatch LOGIN` names a database role, not a command.
COMMAND = re.compile(r"(?:^|(?<=[\s(/]))vlbatch[ \t]+(?=[a-z])(.*)$")
# Where a command's words end: a pipe, a redirect, a comment, or the quote or bracket around a quoted command.
SHELL_END = re.compile(r"\s(?:\||;|&&|>|<|#)|[)`\"\]]")


def _strip_code(text: str) -> str:
    """The page without its code blocks and code spans, where link syntax is only an example."""
    return SPAN.sub("", FENCE.sub("", text))


def _code(text: str) -> Iterator[str]:
    """Each code block's lines (a trailing backslash joins a line to the next) and each code span."""
    for block in FENCE.finditer(text):
        yield from block.group(2).replace("\\\n", " ").splitlines()
    for span in SPAN.finditer(FENCE.sub("", text)):
        yield span.group(1)


def link_problems(page: Path, text: str) -> list[str]:
    problems = []
    for target in LINK.findall(_strip_code(text)):
        path = target.split("#", 1)[0]
        if SCHEME.match(target):
            problems.append(f"{target}: points outside the repository")
        elif ".." in Path(path).parts:
            problems.append(f"{target}: climbs out of its folder (../)")
        elif path.startswith("/"):
            problems.append(f"{target}: an absolute path, not a file of the repository")
        elif path and not (page.parent / path).exists():
            problems.append(f"{target}: no such file in the repository")
    return problems


def _names(node: ast.stmt) -> set[str]:
    """The names a module- or class-level statement defines."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return {node.name}
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
    return {t.id for t in targets if isinstance(t, ast.Name)}


def _defines(tree: ast.Module, dotted: str) -> bool:
    """Whether ``dotted`` (``name``, ``Class.method``) is defined at module level, or in a class body, of ``tree``."""
    body: list[ast.stmt] = tree.body
    for part in dotted.split("."):
        found = [node for node in body if part in _names(node)]
        if not found:
            return False
        last = found[-1]
        body = last.body if isinstance(last, ast.ClassDef) else []
    return True


def reference_problems(text: str, root: Path = ROOT) -> list[str]:
    top = {p.name for p in root.iterdir()}
    problems = []
    for span in (m.group(1) for m in SPAN.finditer(FENCE.sub("", text))):
        ref = REFERENCE.match(span)
        if ref is not None:
            file, name = ref.groups()
            path = root / file
            if not path.is_file():
                problems.append(f"{span}: no file {file}")
            elif not _defines(ast.parse(path.read_text(encoding="utf-8")), name):
                problems.append(f"{span}: {file} defines no {name}")
        elif REPO_PATH.match(span) and span.split("/", 1)[0] in top and "/" in span and not (root / span).exists():
            problems.append(f"{span}: no such path in the repository")
    return problems


def _cli() -> Any:
    """The Typer app as the command group it runs (Typer's own click: duck-typed, ``commands`` and ``params``)."""
    group = typer.main.get_command(app)
    assert isinstance(getattr(group, "commands", None), dict)
    return group


def _subcommands(command: Any) -> dict[str, Any] | None:
    commands = getattr(command, "commands", None)
    return commands if isinstance(commands, dict) else None


def _option_names(command: Any) -> set[str]:
    names = {"--help"}
    for param in command.params:
        names.update(o for o in (*param.opts, *param.secondary_opts) if o.startswith("--"))
    return names


def command_problems(text: str, cli: Any) -> tuple[list[str], list[str]]:
    """(problems, commands found) for every ``vlbatch ...`` in the code of ``text``."""
    problems: list[str] = []
    found: list[str] = []
    for line in _code(text):
        match = COMMAND.search(line)
        if match is None:
            continue
        words = SHELL_END.split(match.group(1), maxsplit=1)[0].split()
        if not words:
            continue
        command = cli.commands.get(words[0])
        used = f"vlbatch {words[0]}"
        if command is None:
            problems.append(f"{used}: no such command (known: {', '.join(sorted(cli.commands))})")
            continue
        rest = words[1:]
        group = _subcommands(command)
        if group is not None and rest and not rest[0].startswith("-"):
            sub = group.get(rest[0])
            used = f"{used} {rest[0]}"
            if sub is None:
                problems.append(f"{used}: no such subcommand (known: {', '.join(sorted(group))})")
                continue
            command, rest = sub, rest[1:]
        found.append(used)
        known = _option_names(command)
        for word in rest:
            option = word.split("=", 1)[0]
            if option.startswith("--") and option not in known:
                problems.append(f"{used} {option}: no such option (known: {', '.join(sorted(known))})")
    return problems, found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_links_stay_in_the_repository_and_name_real_files(page: Path) -> None:
    assert link_problems(page, page.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize("page", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_quoted_paths_and_code_references_exist(page: Path) -> None:
    assert reference_problems(page.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize("page", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_vlbatch_command_in_the_docs_is_real(page: Path) -> None:
    problems, _ = command_problems(page.read_text(encoding="utf-8"), _cli())
    assert problems == []


def test_the_readme_links_each_docs_page() -> None:
    """Every page of the docs site but its start page (which says what the README's opening says)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    linked = {Path(t.split("#", 1)[0]) for t in LINK.findall(_strip_code(text))}
    assert {p.relative_to(ROOT) for p in DOCS if p.name != "index.md"} <= linked


def test_the_checkers_catch_what_they_are_for() -> None:
    page = ROOT / "docs" / "made-up.md"
    links = link_problems(
        page,
        "[ok](architecture.md#the-rooms) [up](../README.md) [root](/etc/passwd) [web](https://example.org) "
        "[gone](nowhere.md) `[in code](../x.md)`",
    )
    assert [p.split(":", 1)[0] for p in links] == ["../README.md", "/etc/passwd", "https", "nowhere.md"]

    refs = reference_problems(
        "`worker/feeder.py::Feeder.add_chunk` `worker/crashes.py::MAX_CRASHES_PER_ITEM` "
        "`worker/feeder.py::Feeder.nope` "
        "`worker/nowhere.py::f` `worker/feeder.py` `worker/gone.py` `/dev/davinci0` `engine/platforms/<vendor>.py`"
    )
    assert refs == [
        "worker/feeder.py::Feeder.nope: worker/feeder.py defines no Feeder.nope",
        "worker/nowhere.py::f: no file worker/nowhere.py",
        "worker/gone.py: no such path in the repository",
    ]

    text = (
        "```bash\n"
        "vlbatch plan /m --max-model-len 16384 \\\n  --compose > compose.yaml\n"
        "ExecStart=/opt/venv/bin/vlbatch worker\n"
        "vlbatch frobnicate --now\n"
        "vlbatch templates add x --cron '0 2 * * *'\n"
        "vlbatch templates nope\n"
        "vlbatch doctor --kernels --fast  # comment --ignored\n"
        'psql -c "CREATE ROLE vlbatch LOGIN"\n'
        "image: vlbatch:310p\n"
        'task["a task of vlbatch worker"] --> feeder\n'
        "```\n"
        "Run `vlbatch quantize MODEL OUT --cpu-out DIR` and `vlbatch.<model>.batch`."
    )
    problems, found = command_problems(text, _cli())
    assert found == [
        "vlbatch plan",
        "vlbatch worker",
        "vlbatch templates add",
        "vlbatch doctor",
        "vlbatch worker",
        "vlbatch quantize",
    ]
    assert [p.split(" (known", 1)[0] for p in problems] == [
        "vlbatch frobnicate: no such command",
        "vlbatch templates nope: no such subcommand",
        "vlbatch doctor --fast: no such option",
    ]

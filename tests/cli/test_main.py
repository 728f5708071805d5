"""Every command the group modules define is a command of the ``vlbatch`` app, under the name it had before the
command line was split into one module per group; a command written but not registered in ``cli/main.py`` fails."""

from __future__ import annotations

import inspect

import typer
import typer.main

from cli import bench, embedded_runs, evaluate, hardware, job_outputs, jobs, keys, serve, templates, webhooks
from cli.main import app

# Modules of top-level commands: every public function whose parameters are Typer options is a command.
COMMAND_MODULES = (embedded_runs, evaluate, serve, job_outputs, hardware, bench)
# Modules of one group each: their own Typer app, added to the main app under the group's name.
GROUP_MODULES = {"jobs": jobs, "templates": templates, "keys": keys, "webhooks": webhooks}
EXPECTED = {
    "tag", "run-batch", "docs", "demo", "eval", "make-eval-docs", "api", "worker", "reconcile", "gc", "energy", "xmp",
    "doctor", "plan", "quantize", "bench", "jobs", "templates", "keys", "migrate", "webhooks",
}  # fmt: skip


def _commands(module: object) -> set[object]:
    """The public functions defined in ``module``: its command bodies (``run_tagging``, the body ``tag`` and ``demo``
    share, aside)."""
    found = set()
    for name, fn in inspect.getmembers(module, inspect.isfunction):
        if fn.__module__ != module.__name__ or name.startswith("_"):  # type: ignore[attr-defined]
            continue
        if name == "run_tagging":
            continue
        found.add(fn)
    return found


def test_the_app_has_every_command_and_group_it_had() -> None:
    click_app = typer.main.get_command(app)
    assert set(click_app.commands) == EXPECTED  # type: ignore[attr-defined]


def test_every_command_function_is_registered_once() -> None:
    registered = [c.callback for c in app.registered_commands]
    assert len(registered) == len(set(registered))
    for module in COMMAND_MODULES:
        missing = _commands(module) - set(registered)
        assert not missing, f"{module.__name__} defines commands that cli/main.py does not register: {missing}"


def test_every_group_module_is_added_under_its_name() -> None:
    groups = {g.name: g.typer_instance for g in app.registered_groups}
    for name, module in GROUP_MODULES.items():
        assert groups.get(name) is module.app
        assert isinstance(module.app, typer.Typer) and module.app.registered_commands

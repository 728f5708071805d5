"""``vlbatch worker --help`` and ``vlbatch api --help`` name the environment variables the service reads, each a
real setting with its own description (issue 40: the worker's help named none)."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from cli.main import app
from cli.serve import API_SETTINGS, WORKER_SETTINGS
from vlbatch.settings import flat_field


@pytest.mark.parametrize(("command", "names"), [("worker", WORKER_SETTINGS), ("api", API_SETTINGS)])
def test_help_lists_the_environment_the_service_reads(command: str, names: tuple[str, ...]) -> None:
    result = CliRunner().invoke(app, [command, "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    listed = re.findall(r"VLBATCH_([A-Z_]+): ", result.output)
    assert [n.lower() for n in listed] == list(names)
    for name in names:
        description = flat_field(name).description
        assert description and description.split(";")[0].split(".")[0] in " ".join(result.output.split())


def test_the_defaults_shown_are_the_settings_own() -> None:
    out = " ".join(CliRunner().invoke(app, ["worker", "--help"], terminal_width=200).output.split())
    assert f"(default {flat_field('database_url').default})" in out
    assert f"(default {flat_field('worker_concurrency').default})" in out

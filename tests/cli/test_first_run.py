"""What the demo's last line tells a newcomer to run works from their shell (issue 40: ``vlbatch`` was not on PATH
after ``scripts/demo.sh``, which runs ``.venv/bin/vlbatch``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from cli.demo import vlbatch_command


def test_without_the_venv_on_path_the_demo_names_the_launcher_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    command = Path(vlbatch_command())
    assert command == Path(sys.executable).parent / "vlbatch"
    assert command.is_file() and os.access(command, os.X_OK)


def test_with_the_venv_on_path_the_name_is_enough(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:/usr/bin:/bin")
    assert vlbatch_command() == "vlbatch"

"""tests/support/lanes.py: the order a run takes its tests in, the budget test's view of a partial run, and each
xdist worker's Redis database index. Each case runs a small made-up suite in a pytest of its own."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.services import redis_db, worker_redis_url

ROOT = Path(__file__).resolve().parents[1]

CONFTEST = """
pytest_plugins = ["tests.support.lanes"]
"""

INI = """
[pytest]
testpaths = tests
addopts = -p no:cacheprovider --strict-markers
markers =
    engine(group): engine
    engine_last: last of its group
    engine_budget: budget
"""

FREE_A = """
def test_free_a1(): pass
def test_free_a2(): pass
"""

ENGINES = """
import pytest

@pytest.mark.engine("w8a8")
def test_compare(): pass

@pytest.mark.engine("shared")
@pytest.mark.engine_last
def test_core_death(): pass

@pytest.mark.engine("shared")
def test_video(): pass

@pytest.mark.engine
def test_bare(): pass

@pytest.mark.engine("zeta")
def test_unknown_z(): pass

@pytest.mark.engine("alpha")
def test_unknown_a(): pass

@pytest.mark.engine("demo")
def test_demo(): pass

@pytest.mark.engine("broken")
def test_broken(): pass

@pytest.mark.engine("rig")
def test_rig(): pass

def test_free_b(): pass
"""

MORE = """
import pytest

@pytest.mark.engine_budget
def test_budget(request):
    from tests.support.lanes import lanes

    (request.config.rootpath / "partial.txt").write_text(f"PARTIAL: {lanes(request.config).partial()}")

@pytest.mark.engine("shared")
def test_documents(): pass

def test_free_c(): pass
"""


def _suite(tmp_path: Path) -> Path:
    tests = tmp_path / "tests"
    tests.mkdir()
    (tmp_path / "pytest.ini").write_text(INI)
    (tests / "conftest.py").write_text(CONFTEST)
    (tests / "test_a.py").write_text(textwrap.dedent(FREE_A))
    (tests / "test_b.py").write_text(textwrap.dedent(ENGINES))
    (tests / "test_c.py").write_text(textwrap.dedent(MORE))
    return tests


def _pytest(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # The made-up suite imports tests.support.lanes from this repository (PYTHONPATH), not its own tests folder.
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [sys.executable, "-m", "pytest", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _order(out: str) -> list[str]:
    return [line.split("::", 1)[1] for line in out.splitlines() if "::" in line and line.startswith("tests/")]


def test_engine_tests_come_after_the_engine_free_ones_grouped_by_engine_in_order(tmp_path: Path) -> None:
    _suite(tmp_path)
    run = _pytest(tmp_path, "--collect-only", "-q", "tests")
    assert run.returncode == 0, run.stdout + run.stderr
    assert _order(run.stdout) == [
        # engine-free, in file order
        "test_free_a1",
        "test_free_a2",
        "test_free_b",
        "test_free_c",
        # shared (file order across files; the engine_last one at the group's end), rig, broken, demo, w8a8
        "test_video",
        "test_documents",
        "test_core_death",
        "test_rig",
        "test_broken",
        "test_demo",
        "test_compare",
        # unknown groups after, by name; a bare marker is the group "engine"
        "test_unknown_a",
        "test_bare",
        "test_unknown_z",
        # the budget test last of all
        "test_budget",
    ]


def _partial(tmp_path: Path, *args: str) -> str:
    (tmp_path / "partial.txt").unlink(missing_ok=True)
    run = _pytest(tmp_path, "-q", *args)
    assert run.returncode == 0, run.stdout + run.stderr
    return (tmp_path / "partial.txt").read_text()


def test_the_budget_test_sees_whether_the_run_held_every_engine_test(tmp_path: Path) -> None:
    _suite(tmp_path)
    assert _partial(tmp_path) == "PARTIAL: None"  # no argument: the testpaths
    assert _partial(tmp_path, "tests") == "PARTIAL: None"
    assert _partial(tmp_path, "-n", "2", "--dist", "loadgroup") == "PARTIAL: None"
    assert _partial(tmp_path, "-m", "not engine") == "PARTIAL: 10 of 10 engine tests were deselected"
    assert _partial(tmp_path, "-k", "budget or free or video") == "PARTIAL: 9 of 10 engine tests were deselected"
    assert _partial(tmp_path, "tests/test_c.py") == "PARTIAL: the run was narrowed to tests/test_c.py"
    assert _partial(tmp_path, "tests/test_b.py::test_free_b", "tests/test_c.py::test_budget") == (
        "PARTIAL: the run was narrowed to tests/test_b.py::test_free_b, tests/test_c.py::test_budget"
    )


def test_under_loadgroup_every_engine_test_and_the_budget_run_on_one_worker_in_order(tmp_path: Path) -> None:
    pytest.importorskip("xdist")
    _suite(tmp_path)
    run = _pytest(tmp_path, "-n", "2", "--dist", "loadgroup", "-v", "tests")
    assert run.returncode == 0, run.stdout + run.stderr
    # -v under xdist: "[gwN] [ pct%] PASSED tests/test_b.py::test_video"
    ran = [line.split() for line in run.stdout.splitlines() if line.startswith("[gw") and "PASSED" in line]
    names = [(words[0], words[-1].split("::", 1)[1]) for words in ran]
    engine = [(worker, name) for worker, name in names if not name.startswith("test_free")]
    assert len({worker for worker, _ in engine}) == 1, names
    assert [name for _, name in engine] == [
        "test_video",
        "test_documents",
        "test_core_death",
        "test_rig",
        "test_broken",
        "test_demo",
        "test_compare",
        "test_unknown_a",
        "test_bare",
        "test_unknown_z",
        "test_budget",
    ]


@pytest.mark.parametrize(
    ("base", "worker", "db"), [(15, None, 15), (15, "gw0", 15), (15, "gw1", 14), (15, "gw2", 13), (3, "master", 3)]
)
def test_each_xdist_worker_counts_down_from_the_base_redis_index(base: int, worker: str | None, db: int) -> None:
    assert redis_db(base, worker) == db


def test_a_worker_past_index_0_is_refused_and_the_url_keeps_its_host(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="no Redis database index left"):
        redis_db(1, "gw2")
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    assert worker_redis_url("redis://127.0.0.1:6379/15") == "redis://127.0.0.1:6379/14"


BUDGET_CONFTEST = """
import os
import tempfile

pytest_plugins = ["tests.support.lanes"]


def pytest_configure(config):
    os.environ.setdefault("VLBATCH_ENGINE_LOAD_LEDGER", os.path.join(tempfile.mkdtemp(), "loads.tsv"))
"""

LOADING = """
import os

import pytest

from engine.runtime.load_ledger import record
from tests.support.engine import ledger


@pytest.mark.engine("shared")
def test_loads():
    if os.environ.get("SKIP_ENGINE"):
        pytest.skip("no engine here")
    for i in range(int(os.environ["LOADS"])):
        record(ledger(), model=f"model-{i % 2}")
    record(ledger(), model="stub", backend="stub")  # the stub engine's loads cost nothing
"""


def _budget_suite(tmp_path: Path) -> None:
    tests = tmp_path / "tests"
    tests.mkdir()
    (tmp_path / "pytest.ini").write_text(INI)
    (tests / "conftest.py").write_text(BUDGET_CONFTEST)
    (tests / "test_loading.py").write_text(LOADING)
    (tests / "test_engine_budget.py").write_text((ROOT / "tests" / "test_engine_budget.py").read_text())


def _budget_run(tmp_path: Path, loads: int, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "LOADS": str(loads), **env}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", *args],
        cwd=tmp_path,
        env=full,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_budget_test_fails_a_whole_run_over_budget_and_never_passes_on_an_empty_ledger(tmp_path: Path) -> None:
    from tests.support.engine import ENGINE_LOAD_BUDGET

    _budget_suite(tmp_path)
    within = _budget_run(tmp_path, ENGINE_LOAD_BUDGET)
    assert within.returncode == 0 and "2 passed" in within.stdout, within.stdout
    over = _budget_run(tmp_path, ENGINE_LOAD_BUDGET + 1)
    assert over.returncode == 1, over.stdout
    assert f"{ENGINE_LOAD_BUDGET + 1} engine loads, over the budget of {ENGINE_LOAD_BUDGET}" in over.stdout
    assert "5x model-0, 4x model-1" in over.stdout
    uncounted = _budget_run(tmp_path, 0)
    assert uncounted.returncode == 1 and "counted no engine load" in uncounted.stdout, uncounted.stdout
    skipped = _budget_run(tmp_path, 0, SKIP_ENGINE="1")
    assert skipped.returncode == 0 and "none of the 1 engine tests ran" in skipped.stdout, skipped.stdout
    partial = _budget_run(tmp_path, ENGINE_LOAD_BUDGET + 1, "tests/test_engine_budget.py")
    assert partial.returncode == 0 and "not a whole run" in partial.stdout, partial.stdout

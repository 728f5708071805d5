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

    print("PARTIAL:", lanes(request.config).partial())

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


def test_the_budget_test_sees_whether_the_run_held_every_engine_test(tmp_path: Path) -> None:
    _suite(tmp_path)
    whole = _pytest(tmp_path, "-q", "-s", "tests")
    assert whole.returncode == 0, whole.stdout + whole.stderr
    assert "PARTIAL: None" in whole.stdout
    by_mark = _pytest(tmp_path, "-q", "-s", "-m", "not engine", "tests")
    assert "PARTIAL: 10 of 10 engine tests were deselected" in by_mark.stdout, by_mark.stdout
    by_key = _pytest(tmp_path, "-q", "-s", "-k", "budget or free or video", "tests")
    assert "PARTIAL: 9 of 10 engine tests were deselected" in by_key.stdout, by_key.stdout
    by_file = _pytest(tmp_path, "-q", "-s", "tests/test_c.py")
    assert "PARTIAL: the run was narrowed to tests/test_c.py" in by_file.stdout, by_file.stdout


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

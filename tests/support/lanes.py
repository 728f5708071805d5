"""The suite's lanes: which process runs a test, and in what order (docs/testing.md).

An engine load is the run's dearest step, so the real-engine tests are ordered by the engine they use, each group
together, so that a group's engine is loaded once and lent to the group's tests: ``pytest.mark.engine("shared")``
names the group. Groups run in ``GROUP_ORDER`` (unknown groups after, by name; a bare ``engine`` marker is a group of
its own), a test marked ``engine_last`` (it breaks its group's engine) at the end of its group, and every engine test
after every engine-free one, so a quick failure shows first. The engine-load budget test (``engine_budget``) comes
last of all: it reads what the engine tests loaded.

Under pytest-xdist with ``--dist loadgroup`` every engine test and the budget test are one work unit (the engine
lane), so they run in that order on one worker while the other workers take the engine-free tests. The engine lane
is told to the scheduler through a file each worker writes after its collection (``LANES_ENV`` names the folder):
xdist's own ``xdist_group`` mark renames node ids to carry the group, which pytest 9.2's structured node ids no
longer allow (pytest-xdist issue 1386), and the controller collects nothing itself. Each worker gets its own Redis
database index (tests/support/services.py ``redis_db``) and its own PostgreSQL database (the session's ``pg_url``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Generator
from pathlib import Path

import pytest
from xdist.scheduler import LoadGroupScheduling

GROUP_ORDER = ("shared", "rig", "broken", "demo", "w8a8")
BARE_GROUP = "engine"
ENGINE_LANE = "engine lane"
LANES_ENV = "VLBATCH_TEST_LANES_DIR"


def engine_group(item: pytest.Item) -> str | None:
    """The engine group an item runs in (None: an engine-free test)."""
    mark = item.get_closest_marker("engine")
    if mark is None:
        return None
    return str(mark.args[0]) if mark.args else BARE_GROUP


def lane_key(item: pytest.Item, index: int) -> tuple[int, int, str, bool, int]:
    """Where an item goes: engine-free tests, then the engine groups in order, then the budget test; within a group,
    collection (file) order, ``engine_last`` tests at its end."""
    if item.get_closest_marker("engine_budget") is not None:
        return (2, 0, "", False, index)
    group = engine_group(item)
    if group is None:
        return (0, 0, "", False, index)
    rank = GROUP_ORDER.index(group) if group in GROUP_ORDER else len(GROUP_ORDER)
    return (1, rank, group, item.get_closest_marker("engine_last") is not None, index)


class Lanes:
    """The lanes of one pytest process, and what it collected and ran of the engine tests (for the budget test)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.engine_tests: set[str] = set()
        self.deselected: set[str] = set()
        self.ran: set[str] = set()
        self.narrowed_by: list[str] = []

    def partial(self) -> str | None:
        """Why this run may not hold every engine test (None: it collected and kept them all)."""
        if self.narrowed_by:
            return f"the run was narrowed to {', '.join(self.narrowed_by)}"
        if self.deselected:
            return f"{len(self.deselected)} of {len(self.engine_tests)} engine tests were deselected"
        if not self.engine_tests:
            return "no engine test was collected"
        return None

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> Generator[None]:
        # Before the -m/-k deselection, so every collected engine test is known; the lane the scheduler is told
        # after it, so it holds only what this run takes.
        self.narrowed_by = _narrowing(self.config)
        ordered = sorted(enumerate(items), key=lambda pair: lane_key(pair[1], pair[0]))
        items[:] = [item for _, item in ordered]
        self.engine_tests = {item.nodeid for item in items if engine_group(item) is not None}
        yield
        folder, worker = os.environ.get(LANES_ENV), os.environ.get("PYTEST_XDIST_WORKER")
        if folder and worker:
            lane = [item.nodeid for item in items if lane_key(item, 0)[0] > 0]
            (Path(folder) / f"{worker}.txt").write_text("".join(f"{nodeid}\n" for nodeid in lane))

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        self.deselected.update(item.nodeid for item in items if engine_group(item) is not None)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # An engine test ran when its call phase did (passed or failed); a skipped one loaded nothing.
        if report.when == "call" and not report.skipped and report.nodeid in self.engine_tests:
            self.ran.add(report.nodeid)


LANES = pytest.StashKey[Lanes]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[LANES] = plugin = Lanes(config)
    config.pluginmanager.register(plugin, "vlbatch-lanes")
    if not hasattr(config, "workerinput") and LANES_ENV not in os.environ:
        # Set before the workers start, so each inherits it.
        os.environ[LANES_ENV] = tempfile.mkdtemp(prefix="vlbatch-lanes-")
        config.add_cleanup(lambda: shutil.rmtree(os.environ.pop(LANES_ENV), ignore_errors=True))


class EngineLaneScheduling(LoadGroupScheduling):
    """xdist's loadgroup, with the engine lane as one more group: every engine test and the budget test, in their
    order, on one worker; the other tests one at a time to whichever worker is free."""

    def schedule(self) -> None:
        if self.collection is None:
            folder = Path(os.environ[LANES_ENV])
            told = sorted(folder.glob("gw*.txt"))
            self.lane = set(told[0].read_text().splitlines()) if told else set()
        super().schedule()

    def _split_scope(self, nodeid: str) -> str:
        return ENGINE_LANE if nodeid in self.lane else super()._split_scope(nodeid)


@pytest.hookimpl(optionalhook=True)  # a run with -p no:xdist has no such hook
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> LoadGroupScheduling | None:
    if config.getvalue("dist") == "loadgroup":
        return EngineLaneScheduling(config, log)  # type: ignore[arg-type]
    return None


def lanes(config: pytest.Config) -> Lanes:
    """This process's lanes (what it collected and ran of the engine tests)."""
    return config.stash[LANES]


def _narrowing(config: pytest.Config) -> list[str]:
    """The run's arguments that select less than the whole suite (its ``testpaths``): a file, a subfolder, a test
    id. Empty for a whole run."""
    base = Path(config.invocation_params.dir)
    suite = [(config.rootpath / p).resolve() for p in config.getini("testpaths")] or [config.rootpath]
    args = [(arg, (base / arg.split("::", 1)[0]).resolve()) for arg in config.args]
    whole = all(any(root.is_relative_to(path) for arg, path in args if "::" not in arg) for root in suite)
    return [] if whole else [arg for arg, path in args if "::" in arg or not any(r.is_relative_to(path) for r in suite)]

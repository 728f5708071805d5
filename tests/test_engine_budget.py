"""The whole run loads no more vLLM engines than its budget (``ENGINE_LOAD_BUDGET``).

Every load, in the test process or a command a test runs, is a line in the run's ledger (tests/support/engine.py).
This test runs after every engine test, in their process (tests/support/lanes.py), and reads the ledger. A run that
did not collect every engine test (a file, a folder, ``-m``, ``-k``) proves nothing about the whole run, so it skips
with the reason; a whole run where engine tests ran but the ledger counted nothing fails, since then the loads are
not being counted at all.
"""

from __future__ import annotations

from collections import Counter

import pytest

from engine.runtime.load_ledger import loads
from tests.support.engine import ENGINE_LOAD_BUDGET, ledger
from tests.support.lanes import lanes


@pytest.mark.engine_budget
def test_the_whole_run_loads_no_more_engines_than_its_budget(request: pytest.FixtureRequest) -> None:
    config = request.config
    state = lanes(config)
    if hasattr(config, "workerinput") and not config.option.loadgroup:
        pytest.skip("engine tests were spread over xdist workers (not --dist loadgroup): this one saw only its own")
    if (why := state.partial()) is not None:
        pytest.skip(f"not a whole run ({why}): its engine loads say nothing of the budget")
    if not state.ran:
        pytest.skip(f"none of the {len(state.engine_tests)} engine tests ran (each skipped)")
    path = ledger()
    assert path is not None, "the run set no engine-load ledger (tests/conftest.py sets one)"
    counted = loads(path)
    assert counted, f"{len(state.ran)} engine tests ran, but the ledger {path} counted no engine load"
    by_model = Counter(model for _, _, model in counted)
    assert len(counted) <= ENGINE_LOAD_BUDGET, (
        f"{len(counted)} engine loads, over the budget of {ENGINE_LOAD_BUDGET}: "
        + ", ".join(f"{n}x {model}" for model, n in by_model.most_common())
    )

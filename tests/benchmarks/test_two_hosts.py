"""benchmarks/two_hosts.py's stand-in engine: what the rehearsal counts as a host's generations must be what it ran.
The rehearsal itself runs for minutes with real processes; it is a benchmark, not a test."""

from __future__ import annotations

from pathlib import Path

from benchmarks.two_hosts import BAD_EVERY, StandInEngine, _count, _photo


def test_a_request_finishes_on_the_next_step_and_is_counted_on_disk(tmp_path: Path) -> None:
    count = tmp_path / "generations"
    engine = StandInEngine(count, step_s=0)
    engine.add_request("r1", {}, None)
    assert engine.step() == [] and _count(count) == 0
    engine.add_request("r2", {}, None)
    assert [o.request_id for o in engine.step()] == ["r1"]
    assert _count(count) == 1  # on disk as it finishes: a SIGKILL after this step leaves 1
    assert [o.request_id for o in engine.step()] == ["r2"] and _count(count) == 2


def test_one_photo_in_a_hundred_is_corrupt() -> None:
    photos = [_photo(n) for n in range(2 * BAD_EVERY)]
    assert sum(not p.startswith(b"\xff\xd8") for p in photos) == 2

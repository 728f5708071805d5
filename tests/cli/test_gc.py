"""``vlbatch gc --dry-run`` then ``vlbatch gc``, the real commands on SQLite and PostgreSQL: the dry run deletes
nothing and says exactly what the real run then deletes; ``vlbatch keys retention`` sets and lists a tenant's own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.jobs.test_janitor import EXPECTED, _counts
from tests.support.engine import child_env
from tests.support.retention_world import DAY, build


def _vlbatch(db_url: str, data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = child_env()
    env.update(
        VLBATCH_DATABASE_URL=db_url,
        VLBATCH_DATA_DIR=str(data_dir),
        VLBATCH_RETENTION_JOBS_S=str(DAY),
        VLBATCH_RETENTION_FILES_S=str(DAY),
        VLBATCH_RETENTION_ENGINE_SAMPLES_S=str(DAY),
        VLBATCH_JANITOR_BATCH_ROWS="3",
    )
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args], env=env, capture_output=True, text=True, timeout=120
    )


def _table(out: str, verb: str) -> dict[str, str]:
    rows = [line.split("\t") for line in out.strip().splitlines()]
    assert all(r[0] == verb and len(r) == 3 for r in rows), out
    return {r[1]: r[2] for r in rows}


def test_gc_dry_run_says_what_gc_then_deletes(db_url: str, tmp_path: Path) -> None:
    data = tmp_path / "data"
    world = build(db_url, data)
    before = _counts(world.sessions)
    dry = _vlbatch(db_url, data, "gc", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    planned = _table(dry.stdout, "would delete")
    assert _counts(world.sessions) == before
    real = _vlbatch(db_url, data, "gc")
    assert real.returncode == 0, real.stderr
    deleted = _table(real.stdout, "deleted")
    assert deleted == planned
    assert {k: int(v) for k, v in deleted.items() if k != "bytes"} == dict(EXPECTED)
    assert int(deleted["bytes"]) == 500 + 100 + 9 * 17
    # nothing was being written meanwhile: exactly the expected rows went
    assert _counts(world.sessions) == before - EXPECTED
    again = _vlbatch(db_url, data, "gc", "--dry-run")
    assert _table(again.stdout, "would delete") == {"bytes": "0"}


def test_keys_retention_sets_lists_and_clears(tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path / 'k.db'}"
    data = tmp_path / "data"
    made = _vlbatch(db_url, data, "keys", "retention", "acme", "--jobs-s", "3600")
    assert made.returncode == 0, made.stderr
    assert "ended jobs kept 3600 s, files kept 86400 s" in made.stdout  # files: the default
    listed = _vlbatch(db_url, data, "keys", "retention").stdout.strip().splitlines()
    assert listed == ["acme\tjobs 3600 s\tfiles (the default)"]
    assert (
        _vlbatch(db_url, data, "keys", "retention", "acme", "--files-s", "0")
        .stdout.strip()
        .endswith("ended jobs kept 86400 s, files kept for ever")
    )
    refused = _vlbatch(db_url, data, "keys", "retention", "acme", "--jobs-s", "-1")
    assert refused.returncode != 0
    cleared = _vlbatch(db_url, data, "keys", "retention", "acme", "--clear")
    assert "ended jobs kept 86400 s, files kept 86400 s" in cleared.stdout
    assert _vlbatch(db_url, data, "keys", "retention").stdout.strip() == ""

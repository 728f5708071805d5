"""``vlbatch xmp`` and ``vlbatch energy`` run as the real command (a subprocess) against SQLite and PostgreSQL: a job id
the database does not have ends in the CLI's one-line error with its code and a non-zero exit, writing nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.engine import child_env
from vlbatch.db.session import migrate


def _vlbatch(db_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = child_env()
    env["VLBATCH_DATABASE_URL"] = db_url
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args], env=env, capture_output=True, text=True, timeout=120
    )


def test_xmp_of_an_unknown_job_fails_with_its_code(db_url: str, tmp_path: Path) -> None:
    migrate(db_url)
    out = tmp_path / "sidecars"
    done = _vlbatch(db_url, "xmp", "no-such-job", "--out", str(out))
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert done.stderr.strip().splitlines()[-1] == "error job_not_found: no job no-such-job"
    assert "sidecars written" not in done.stdout and not out.exists()

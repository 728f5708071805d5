"""Prints the fault x outcome table: runs the fault tests against real processes and collects their rows.

``tests/e2e/test_faults.py`` (one Celery worker with the vLLM CPU engine on the generated tiny model, a
private Redis and a private PostgreSQL) and ``tests/e2e/test_worker_faults.py`` (workers with the stub engine,
SIGTERMed or SIGKILLed and replaced) inject each fault mid-job and print one ``FAULT|`` row per case:
items, succeeded, failed, cancelled, items claimed again, items in flight at the fault, and the seconds from
submission to the job's end. This script runs those tests with pytest and prints the rows as a table. It
takes several minutes (one engine load).

Usage: python benchmarks/fault_matrix.py [extra pytest arguments]
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ["tests/e2e/test_faults.py", "tests/e2e/test_worker_faults.py"]
HEADER = ("fault", "items", "succeeded", "failed", "cancelled", "claimed again", "in flight at fault", "s to finish")


def collect(extra: list[str]) -> tuple[list[list[str]], int]:
    cmd = [sys.executable, "-m", "pytest", "-s", "-q", "-p", "no:cacheprovider", *TESTS, *extra]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    # pytest -q writes a test's progress dot on the line the next test prints on: find the row anywhere in a line.
    rows = [line.split("FAULT|", 1)[1].split("|") for line in proc.stdout.splitlines() if "FAULT|" in line]
    if proc.returncode:
        sys.stderr.write(proc.stdout[-4000:])
    return rows, proc.returncode


def table(rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def main() -> int:
    rows, rc = collect(sys.argv[1:])
    print(table(rows))
    if rc:
        print(f"\npytest exited {rc}: the rows above are the cases that finished", file=sys.stderr)
    return rc


if __name__ == "__main__":
    raise SystemExit(main())

#!/usr/bin/env bash
# The whole test suite from a fresh machine: installs what it needs, starts Redis and PostgreSQL
# when they are not already running, checks lint (ruff) and the import layers (lint-imports), then runs pytest
# with types (mypy) checked beside it. Extra arguments go to pytest, after the suite's own
# (`scripts/test.sh -m "not engine" tests/api`: the fast lane for a change in one package). The lanes, the
# engine groups and the engine-load budget: docs/testing.md.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v uv >/dev/null 2>&1 || python3 -m pip install --quiet uv
uv sync --extra cpu --extra dev --quiet

if ! (exec 3<>/dev/tcp/127.0.0.1/6379) 2>/dev/null; then
  command -v redis-server >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq redis-server; }
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no
fi
if ! (exec 3<>/dev/tcp/127.0.0.1/5432) 2>/dev/null; then
  if ! ls /etc/postgresql >/dev/null 2>&1; then
    apt-get update -qq && apt-get install -y -qq postgresql
  fi
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -1)" main start
fi
for _ in $(seq 1 30); do
  (exec 3<>/dev/tcp/127.0.0.1/5432) 2>/dev/null && (exec 3<>/dev/tcp/127.0.0.1/6379) 2>/dev/null && break
  sleep 1
done

# The dashboard test drives Debian's chromium (Playwright through its executable path).
command -v chromium >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq chromium >/dev/null; }
# The XMP and IPTC tests read the tags back with exiftool, as photo managers read them.
command -v exiftool >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq libimage-exiftool-perl >/dev/null; }

# The run's temporary files on memory when the machine has it (and TMPDIR names no other place): SQLite syncs
# every statement of a migration, which on a busy disk takes twenty times as long, and private PostgreSQL clusters
# start without waiting on the disk. pytest's own folder is named short (--basetemp): a test's Unix socket path must
# fit in 108 bytes.
basetemp=()
if [ -z "${TMPDIR:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ]; then
  TMPDIR=$(mktemp -d /dev/shm/vt.XXXXXX)
  export TMPDIR
  trap 'rm -rf "$TMPDIR"' EXIT
  basetemp=(--basetemp "$TMPDIR/t")
fi

# Every process the suite starts (pytest's workers, the commands and servers it runs) imports torch and vLLM;
# without bytecode written once, each would compile them again.
unset PYTHONDONTWRITEBYTECODE

# Lint and layers first: cheap (seconds), and a failure here is a real defect.
.venv/bin/ruff check .
.venv/bin/ruff format --check . >/dev/null || { .venv/bin/ruff format --check .; exit 1; }
.venv/bin/lint-imports  # the contracts in pyproject.toml ([tool.importlinter])

# Types beside the tests: on a fresh clone (no .mypy_cache) mypy takes about a minute of one core, which the
# tests' start (their workers collecting, servers waiting) leaves idle. Its report follows the tests' when it fails.
types=$(mktemp)
.venv/bin/mypy cli benchmarks api worker jobs engine kernels pipelines preprocessing vlbatch >"$types" 2>&1 &
mypy_pid=$!

# Three processes: the engine lane (every real-engine test, in engine-group order) on one, the engine-free tests
# on the other two and on the first once its lane is done (tests/support/lanes.py).
status=0
.venv/bin/python -m pytest -n "${VLBATCH_TEST_PROCESSES:-3}" --dist loadgroup "${basetemp[@]}" "$@" || status=$?

if ! wait "$mypy_pid"; then
  cat "$types"
  echo "mypy failed (above)"
  status=1
fi
rm -f "$types"
exit "$status"

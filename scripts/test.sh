#!/usr/bin/env bash
# The whole test suite from a fresh machine: installs what it needs, starts Redis and PostgreSQL
# when they are not already running, checks lint (ruff), types (mypy) and the import layers (lint-imports),
# then runs pytest. Extra arguments go to pytest.
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

# Lint, types and layers first: cheap, and a failure here is a real defect.
.venv/bin/ruff check .
.venv/bin/ruff format --check . >/dev/null || { .venv/bin/ruff format --check .; exit 1; }
.venv/bin/mypy cli benchmarks api worker jobs engine kernels pipelines preprocessing vlbatch
.venv/bin/lint-imports  # the contracts in pyproject.toml ([tool.importlinter])

exec .venv/bin/python -m pytest "$@"

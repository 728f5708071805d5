#!/usr/bin/env bash
# The main job on embedded defaults from a fresh machine: installs the CPU engine, generates a tiny
# random-weight model and sample photos, tags them in process (SQLite, no broker) and prints results.
# Extra arguments go to `vlbatch demo` (e.g. --photos 200 --workdir /tmp/demo).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v uv >/dev/null 2>&1 || python3 -m pip install --quiet uv
uv sync --extra cpu --inexact --quiet  # --inexact: keep the dev tools if the tests installed them
exec .venv/bin/vlbatch demo "$@"

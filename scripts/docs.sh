#!/usr/bin/env bash
# The docs site (mkdocs-material over docs/, mkdocs.yml): regenerates the pages made from the code (settings, error
# codes, API reference: python -m cli.docs_pages), then serves the site on http://127.0.0.1:8001 with live reload.
# `scripts/docs.sh build DIR` builds it into DIR instead (--strict, as the suite does). Offline: nothing is fetched.
set -euo pipefail
cd "$(dirname "$0")/.."
# Installs only when the tools are missing: a sync reinstalls the CPU engine's wheel, which a running demo or worker
# of this checkout would lose under it.
if [ ! -x .venv/bin/mkdocs ]; then
  command -v uv >/dev/null 2>&1 || python3 -m pip install --quiet uv
  uv sync --extra cpu --extra dev --inexact --quiet
fi
.venv/bin/python -m cli.docs_pages
export NO_MKDOCS_2_WARNING=1
if [ "${1:-}" = "build" ]; then
  exec .venv/bin/mkdocs build --strict --site-dir "${2:-site}"
fi
exec .venv/bin/mkdocs serve --strict --dev-addr "${DOCS_ADDR:-127.0.0.1:8001}"

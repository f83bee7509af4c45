#!/usr/bin/env bash
# Run the whole tokenloom test suite on a fresh machine that has only Python.
# Creates ./.venv, installs tokenloom with every extra (torch is pinned to the
# CPU build 2.13.0), then runs pytest. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e '.[dev]'
exec .venv/bin/python -m pytest "$@"

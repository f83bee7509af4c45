#!/usr/bin/env bash
# Run the whole tokenloom test suite on a fresh machine that has only Python.
# Creates ./.venv, installs tokenloom with every extra (torch is pinned to the
# CPU build 2.13.0), puts megatron-core 0.16.1 beside it (not into the venv) for
# the differential tests, then runs pytest. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e '.[dev]'

# megatron-core is the oracle of tests/differential, never a dependency: it lives in
# its own folder and only the differential tests' subprocesses see it.
if [ ! -d .megatron-core/megatron/core/datasets ]; then
    if ! .venv/bin/python -m pip install --quiet --no-deps --target .megatron-core \
            megatron-core==0.16.1; then
        echo "note: megatron-core 0.16.1 could not be installed for this Python;" \
             "the differential tests will skip" >&2
    fi
fi
export TOKENLOOM_MEGATRON_PATH="$PWD/.megatron-core"
exec .venv/bin/python -m pytest "$@"

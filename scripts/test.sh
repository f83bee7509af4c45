#!/usr/bin/env bash
# Run the whole tokenloom test suite on a fresh machine that has only Python.
# Creates ./.venv, installs tokenloom with every extra (torch pinned to the CPU build
# 2.13.0 here, never in the package's extras), puts megatron-core 0.16.1 beside it (not
# into the venv) for the differential tests, runs ruff and mypy, then pytest. Extra
# arguments go to pytest (and skip the static checks), e.g. `bash scripts/test.sh tests/format -x`.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
PIP=(.venv/bin/python -m pip install --quiet --disable-pip-version-check)
"${PIP[@]}" --upgrade pip
# torch==2.13.0 is named in the same command so that the extras' lower bound never
# pulls a multi-GB CUDA build.
"${PIP[@]}" -e '.[dev]' 'torch==2.13.0'

# megatron-core is the oracle of the differential tests, never a dependency: it lives in
# its own folder and only the differential tests' subprocesses see it.
if [ ! -d .megatron-core/megatron/core/datasets ]; then
    if ! "${PIP[@]}" --no-deps --target .megatron-core megatron-core==0.16.1; then
        echo "note: megatron-core 0.16.1 could not be installed for this Python;" \
             "the differential tests will skip" >&2
    fi
fi
export TOKENLOOM_MEGATRON_PATH="$PWD/.megatron-core"
# keep every test process (Ray, S3, botocore, HF) off the network and out of ~/.aws
export RAY_USAGE_STATS_ENABLED=0 RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 AWS_EC2_METADATA_DISABLED=true
if [ "$#" -eq 0 ]; then
    bash scripts/lint.sh
fi
exec .venv/bin/python -m pytest "$@"

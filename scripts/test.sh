#!/usr/bin/env bash
# Set up and run tokenloom's tests on a fresh machine that has only Python.
#
#   bash scripts/test.sh                 # lint, then the whole suite, tier by tier (CI)
#   bash scripts/test.sh --quick         # the quick tier only (unit tests, about a minute)
#   bash scripts/test.sh --default       # every test not marked slow (quick tier included)
#   bash scripts/test.sh --slow          # the slow tier only
#   bash scripts/test.sh tests/format -x # pytest with these arguments (no lint)
#
# A tier flag may be followed by more pytest arguments: `bash scripts/test.sh --quick -x`.
# The tiers are pytest markers (see CONTRIBUTING.md, "Tests"); pytest-xdist runs them on
# TOKENLOOM_TEST_WORKERS processes (default 2; 0 runs them in this process).
#
# Set-up: creates ./.venv and installs tokenloom with every extra (torch pinned to the
# CPU build 2.13.0 here, never in the package's extras), again only when pyproject.toml
# changed; puts megatron-core 0.16.1 beside it (not into the venv) for the differential
# tests.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
WORKERS="${TOKENLOOM_TEST_WORKERS:-2}"
TORCH='torch==2.13.0'
say() { echo "test.sh: $*" >&2; }

PIP=(.venv/bin/python -m pip install --quiet --disable-pip-version-check)
if [ ! -x .venv/bin/python ]; then
    say "creating .venv with $("$PYTHON" --version 2>&1)"
    "$PYTHON" -m venv .venv
    say "upgrading pip in .venv"
    "${PIP[@]}" --upgrade pip
fi
# Reinstall only when what the install depends on changed (an editable install follows
# src/ by itself).
STAMP=.venv/.tokenloom-dev-install
WANT="$(cat pyproject.toml; echo "$TORCH")"
WANT="$(printf '%s' "$WANT" | .venv/bin/python -c 'import hashlib,sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())')"
if [ "$(cat "$STAMP" 2>/dev/null)" != "$WANT" ]; then
    say "installing tokenloom[dev] and $TORCH (CPU) into .venv (minutes on a fresh machine)"
    # torch is named in the same command so that the extras' lower bound never pulls a
    # multi-GB CUDA build.
    "${PIP[@]}" -e '.[dev]' "$TORCH"
    echo "$WANT" >"$STAMP"
else
    say ".venv is up to date with pyproject.toml (delete $STAMP to reinstall)"
fi

# megatron-core is the oracle of the differential tests, never a dependency: it lives in
# its own folder and only the differential tests' subprocesses see it.
if [ ! -d .megatron-core/megatron/core/datasets ]; then
    say "installing megatron-core 0.16.1 into .megatron-core (the differential tests' oracle)"
    if ! "${PIP[@]}" --no-deps --target .megatron-core megatron-core==0.16.1; then
        echo "note: megatron-core 0.16.1 could not be installed for this Python;" \
             "the differential tests will skip" >&2
    fi
fi
export TOKENLOOM_MEGATRON_PATH="$PWD/.megatron-core"
# keep every test process (Ray, S3, botocore, HF) off the network and out of ~/.aws
export RAY_USAGE_STATS_ENABLED=0 RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 AWS_EC2_METADATA_DISABLED=true
# The tests and src are compiled once into __pycache__ (gitignored), not again by every
# pytest worker and every subprocess a test starts.
unset PYTHONDONTWRITEBYTECODE

say "filling numba's kernel cache (tokenloom warmup: ~30 s when the kernels changed, else ~2 s)"
.venv/bin/tokenloom warmup --quiet || say "warmup failed: the tests will compile the kernels"

PYTEST=(.venv/bin/python -m pytest)
if [ "$WORKERS" != 0 ]; then
    # loadgroup: the tests of one xdist_group (a Ray cluster, gloo ranks) run one after
    # the other on one worker; see tests/conftest.py.
    PARALLEL=(-n "$WORKERS" --dist loadgroup)
else
    PARALLEL=()
fi

# tier NAME DESCRIPTION MARKER-EXPRESSION [pytest arguments]
tier() {
    local name="$1" what="$2" expr="$3"
    shift 3
    say "tier $name: $what (-m '$expr')"
    local started=$SECONDS
    local rc=0
    "${PYTEST[@]}" "${PARALLEL[@]}" -m "$expr" "$@" || rc=$?
    say "tier $name: exit $rc after $((SECONDS - started)) s"
    return "$rc"
}

QUICK=(quick "unit tests: no subprocesses, servers, clusters or megatron-core" "quick")
REST=(default "the rest of the default tier: real processes, S3, gloo, Ray, megatron-core"
      "not quick and not slow")
DEFAULT=(default "every test not marked slow" "not slow")
SLOW=(slow "long tests, by nature" "slow")

case "${1:-}" in
    --quick) shift; tier "${QUICK[@]}" "$@" ;;
    --default) shift; tier "${DEFAULT[@]}" "$@" ;;
    --slow) shift; tier "${SLOW[@]}" "$@" ;;
    "")
        say "lint: ruff and mypy"
        bash scripts/lint.sh
        status=0
        # every test once, tier by tier: each tier's time is in the log, with its
        # slowest tests
        tier "${QUICK[@]}" --durations=10 || status=1
        tier "${REST[@]}" --durations=20 || status=1
        tier "${SLOW[@]}" --durations=20 || status=1
        exit "$status"
        ;;
    *) exec "${PYTEST[@]}" "$@" ;;
esac

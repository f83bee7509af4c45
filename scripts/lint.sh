#!/usr/bin/env bash
# Static checks, as CI runs them: ruff (lint and format) and mypy (strict for format/,
# cache/, index/ and kernels/; configured in pyproject.toml). Needs .venv from
# scripts/test.sh (or any environment with `pip install -e '.[lint]'`).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${TOKENLOOM_VENV:-.venv}/bin"
"$BIN/ruff" check src tests benchmarks examples
"$BIN/ruff" format --check src tests benchmarks examples
"$BIN/mypy"
echo "lint: ruff and mypy passed"

#!/usr/bin/env bash
# Static checks, as CI runs them: ruff (lint, format, and a docstring on every public name
# of the library) and mypy (strict for format/,
# cache/, index/ and kernels/; configured in pyproject.toml). Needs .venv from
# scripts/test.sh (or any environment with `pip install -e '.[lint]'`, which pins the
# exact ruff and mypy versions: a new release of either cannot turn CI red).
# The format check covers the Python trees below (and any Markdown in them); the docs'
# and README's code blocks are prose, aligned by hand, and are not checked.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${TOKENLOOM_VENV:-.venv}/bin"
PATHS=(src tests benchmarks examples)
say() { echo "lint.sh: $*" >&2; }
say "ruff $("$BIN/ruff" --version | cut -d' ' -f2): check and format --check of ${PATHS[*]}"
"$BIN/ruff" check "${PATHS[@]}"
"$BIN/ruff" format --check "${PATHS[@]}"
say "mypy $("$BIN/mypy" --version | cut -d' ' -f2) (a minute on a cold cache)"
"$BIN/mypy"
echo "lint: ruff and mypy passed"

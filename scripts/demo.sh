#!/usr/bin/env bash
# Run the tokenloom demo on a fresh machine that has only Python: trains a real
# byte-level BPE on this Python's standard library, preprocesses two corpora
# (code and docstrings) to .bin/.idx and builds a blended GPT dataset from them.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e '.[all]'
exec .venv/bin/tokenloom demo "$@"

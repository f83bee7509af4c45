#!/usr/bin/env bash
# Run the tokenloom demo on a fresh machine that has only Python: trains a real
# byte-level BPE on this Python's standard library, preprocesses two corpora
# (code and docstrings) to .bin/.idx and builds a blended GPT dataset from them.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
say() { echo "demo.sh: $*" >&2; }
if [ ! -x .venv/bin/python ]; then
    say "creating .venv with $("$PYTHON" --version 2>&1)"
    "$PYTHON" -m venv .venv
fi
say "upgrading pip in .venv"
.venv/bin/python -m pip install --quiet --upgrade pip
say "installing tokenloom[all] into .venv (a minute or two on a fresh machine)"
.venv/bin/python -m pip install --quiet -e '.[all]'
say "running tokenloom demo"
exec .venv/bin/tokenloom demo "$@"

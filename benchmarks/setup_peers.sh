#!/usr/bin/env bash
# Create .peers-venv: a separate environment for the peer loaders that bench_peers.py
# measures side by side with tokenloom and megatron-core (issue 22 §5): OLMo-core's
# numpy fixed-length dataset and litdata's StreamingDataset. These are never extras of
# tokenloom. torch is installed FIRST, pinned to the CPU build 2.13.0 (an unpinned torch
# would pull a multi-GB CUDA build), and checked again after the peers are installed.
#   bash benchmarks/setup_peers.sh && python benchmarks/bench_peers.py
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
VENV="${PEERS_VENV:-.peers-venv}"
say() { echo "setup_peers.sh: $*" >&2; }
if [ ! -x "$VENV/bin/python" ]; then
    say "creating $VENV with $("$PYTHON" --version 2>&1)"
    "$PYTHON" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip install --quiet --disable-pip-version-check)
say "installing numpy and torch 2.13.0 (CPU) first"
"${PIP[@]}" numpy "torch==2.13.0"
say "installing the peers: ai2-olmo-core, litdata"
"${PIP[@]}" "torch==2.13.0" ai2-olmo-core litdata
"$VENV/bin/python" - <<'PY'
import importlib.metadata as m
torch = m.version("torch")
if not torch.startswith("2.13.0"):
    raise SystemExit(f"setup_peers.sh: pip replaced torch 2.13.0 with {torch}")
print("peers env ready: torch", torch, "| ai2-olmo-core", m.version("ai2-olmo-core"),
      "| litdata", m.version("litdata"), "| numpy", m.version("numpy"))
PY

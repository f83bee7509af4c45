#!/usr/bin/env bash
# Create .bench-venv: the benchmark's own environment, with tokenloom (editable, all
# extras) and megatron-core 0.16.1 side by side. torch is pinned to the CPU build
# 2.13.0: an unpinned torch would pull a multi-GB CUDA build.
#   bash benchmarks/setup.sh && .bench-venv/bin/python benchmarks/run.py
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
say() { echo "setup.sh: $*" >&2; }
if [ ! -x .bench-venv/bin/python ]; then
    say "creating .bench-venv with $("$PYTHON" --version 2>&1)"
    "$PYTHON" -m venv .bench-venv
fi
PIP=(.bench-venv/bin/python -m pip install --quiet --disable-pip-version-check)
say "installing numpy, torch 2.13.0 (CPU) and megatron-core 0.16.1 (minutes on a fresh machine)"
"${PIP[@]}" numpy "torch==2.13.0" "megatron-core==0.16.1"
say "installing tokenloom[all] (editable)"
"${PIP[@]}" -e '.[all]'
say "checking megatron-core's compiled helpers"
# megatron-core's dataset modules need only numpy + torch; its compiled helpers come
# with the wheel (helpers_cpp.*.so), no compiler needed. Fail now if that ever changes.
.bench-venv/bin/python -W ignore - <<'PY'
from megatron.core.datasets import helpers_cpp
from megatron.core.datasets.gpt_dataset import GPTDataset
from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
import importlib.metadata as m
import tokenloom
print("bench env ready: megatron-core", m.version("megatron-core"), "| torch", m.version("torch"),
      "| tokenloom", tokenloom.__version__, "| helpers_cpp", helpers_cpp.__file__.rsplit("/", 1)[1])
PY

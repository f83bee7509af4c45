"""tokenloom's own DataLoader workers keep the SIGBUS handler that names a shrunk ``.bin``.

torch installs its own SIGBUS handler in every DataLoader worker (it blames shared
memory); ``build_pretraining_data_loader`` wraps ``worker_init_fn`` so that tokenloom's
is put back on top first (:class:`tokenloom.training.options.WorkerInit`). A worker that
then reads a ``.bin`` truncated under its mapping says which file before it dies.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy
import pytest

from tokenloom.format import IndexedDatasetBuilder
from tokenloom.format.sigbus import supported

pytest.importorskip("llvmlite")
pytest.importorskip("torch")
pytestmark = [
    pytest.mark.processes,
    pytest.mark.skipif(not supported(), reason="the handler needs Linux on x86_64/aarch64"),
]

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import os, sys
from tokenloom import BlendedMegatronDatasetBuilder, GPTDataset, GPTDatasetConfig
from tokenloom.training import build_pretraining_data_loader
prefix, cache = sys.argv[1], sys.argv[2]
config = GPTDatasetConfig(random_seed=7, sequence_length=64, blend=([prefix], None),
    split="1,0,0", reset_position_ids=False, reset_attention_mask=False,
    eod_mask_loss=False, tokenizer={"vocab_size": 60000, "eod": 0}, path_to_cache=cache)
train = BlendedMegatronDatasetBuilder(GPTDataset, [200, None, None], lambda: True, config).build()[0]

def shrink(worker_id):  # the user's worker_init_fn: runs after tokenloom's re-install
    os.truncate(prefix + ".bin", 4096)
    print("truncated", flush=True)

loader = build_pretraining_data_loader(train, consumed_samples=0, micro_batch_size=8,
    num_workers=1, multiprocessing_context="fork", worker_init_fn=shrink)
try:
    next(iter(loader))
except RuntimeError as error:
    print("error:", error, flush=True)
"""


@pytest.mark.timeout(300)
def test_a_loader_worker_reading_a_shrunk_bin_names_the_file(tmp_path):
    prefix = str(tmp_path / "data")
    builder = IndexedDatasetBuilder(prefix + ".bin", dtype=numpy.uint16)
    for i in range(64):
        builder.add_item(numpy.full(20000, 1 + i, dtype=numpy.uint16))
        builder.end_document()
    builder.finalize(prefix + ".idx")
    environment = dict(os.environ, TOKENLOOM_DISABLE_NUMBA="0")
    environment.pop("TOKENLOOM_SIGBUS_HANDLER", None)
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SCRIPT), prefix, str(tmp_path / "cache")],
        capture_output=True,
        text=True,
        timeout=240,
        env=environment,
        cwd=str(ROOT),
    )
    assert "truncated" in done.stdout, done.stdout + done.stderr[-3000:]
    assert "error: DataLoader worker" in done.stdout, done.stdout + done.stderr[-3000:]
    assert f"tokenloom: SIGBUS reading {prefix}.bin" in done.stderr, done.stderr[-3000:]

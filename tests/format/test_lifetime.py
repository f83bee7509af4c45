"""Arrays handed out survive close() and garbage collection (megatron-core segfaults here).

The risky part runs in a subprocess so that a segfault fails the test instead of
killing pytest.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from tests.support.format_files import random_documents, write_dataset

SCRIPT = textwrap.dedent(
    """
    import gc, sys
    import numpy
    from tokenloom.format import IndexedDataset

    prefix, mmap = sys.argv[1], sys.argv[2] == "mmap"
    dataset = IndexedDataset(prefix, mmap=mmap)
    lengths, pointers = dataset.sequence_lengths, dataset.sequence_pointers
    documents, tokens = dataset.document_indices, dataset.tokens
    first, chunk = dataset[0], dataset[1:4]
    expected = (lengths.tolist(), documents.tolist(), first.tolist(), [c.tolist() for c in chunk])
    if sys.argv[3] == "close":
        dataset.close()
    del dataset
    gc.collect()
    junk = [numpy.ones(1 << 16) for _ in range(64)]  # reuse freed memory
    got = (lengths.tolist(), documents.tolist(), first.tolist(), [c.tolist() for c in chunk])
    assert got == expected, "arrays changed after the dataset went away"
    assert int(pointers[-1]) >= 0
    if tokens is not None:
        assert int(tokens.sum()) >= 0
    print("ok")
    """
)


@pytest.mark.parametrize("mode", ["close", "gc"])
@pytest.mark.parametrize("mmap", ["mmap", "file"])
@pytest.mark.processes
def test_arrays_outlive_dataset(tmp_path, mode, mmap):
    prefix = write_dataset(tmp_path / "data", random_documents(seed=5))
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, prefix, mmap, mode],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, f"exit {result.returncode}: {result.stderr}"
    assert result.stdout.strip() == "ok"

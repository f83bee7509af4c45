"""Issue 9.5: a cache entry with valid checksums but out-of-range indices never gives a
raw IndexError, silent zeros or a crash: ``dataset[i]`` and ``get_batch`` raise a
CacheError naming the array. Each case runs in a subprocess, so that a segfault fails
the test instead of killing pytest."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy
import pytest
from tests.support.dataset_files import small_config, split_indices, write_corpus

from tokenloom.datasets import GPTDataset, Split

pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parents[2]


def _craft(name: str, arrays: dict) -> dict:
    document, sample, shuffle = (
        numpy.array(arrays[n]) for n in ("document_index", "sample_index", "shuffle_index")
    )
    if name == "document id past the end":
        document[int(sample[shuffle[0], 0])] = 10**6
    elif name == "negative document id":
        document[int(sample[shuffle[0], 0])] = -5
    elif name == "offset past the document":
        sample[shuffle[0] + 1, 1] = 10**6
    elif name == "negative offset":
        sample[shuffle[0], 1] = -3
    elif name == "position past document_index":
        sample[-1, 0] = document.shape[0] + 10
    elif name == "rows out of order":
        sample[1:] = sample[1:][::-1]
    elif name == "shuffle row past sample_index":
        shuffle[0] = 10**6
    elif name == "short sample in the middle":  # would be padded: silent zeros
        sample[2, 1] -= 3
    return {"document_index": document, "sample_index": sample, "shuffle_index": shuffle}


CASES = [
    "document id past the end",
    "negative document id",
    "offset past the document",
    "negative offset",
    "position past document_index",
    "rows out of order",
    "shuffle row past sample_index",
    "short sample in the middle",
]

CHILD = textwrap.dedent("""
    import sys
    sys.path[:0] = [{root!r}]
    from tests.support.dataset_files import small_config, split_indices
    from tokenloom.datasets import GPTDataset, Split
    from tokenloom.errors import CacheError
    config = small_config({corpus!r}, {cache!r}, create_attention_mask=False)
    low = GPTDataset.build_low_level_dataset({corpus!r}, config)
    ds = GPTDataset(low, {corpus!r}, split_indices(config, Split.train, len(low)), None,
                    Split.train, config, build_if_missing=False)
    for name, call in (("getitem", lambda: [ds[k] for k in range(len(ds))]),
                       ("get_batch", lambda: ds.get_batch(list(range(len(ds)))))):
        try:
            call()
        except CacheError as error:
            print(name, "CacheError", error)
        else:
            print(name, "no error")
""")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    lengths = numpy.random.default_rng(4).integers(5, 40, 60)
    return write_corpus(tmp_path_factory.mktemp("crafted") / "c", lengths, seed=4, vocab=40)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("numba", ["0", "1"])
@pytest.mark.parametrize("case", CASES)
def test_crafted_index_cache_gives_a_cache_error(corpus, tmp_path, case, numba):
    from tokenloom.cache import array_digest

    config = small_config(corpus, tmp_path, create_attention_mask=False)
    low = GPTDataset.build_low_level_dataset(corpus, config)
    indices = split_indices(config, Split.train, len(low))
    ds = GPTDataset(low, corpus, indices, None, Split.train, config)
    crafted = _craft(
        case, {n: getattr(ds, n) for n in ("document_index", "sample_index", "shuffle_index")}
    )
    ds.cache.store(ds.cache_key, crafted, checks={"indices": array_digest(indices)})
    env = dict(os.environ, TOKENLOOM_DISABLE_NUMBA=numba)
    script = CHILD.format(root=str(ROOT), corpus=corpus, cache=str(tmp_path))
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=100, env=env
    )
    assert done.returncode == 0, f"child died ({done.returncode}): {done.stderr[-2000:]}"
    lines = done.stdout.splitlines()
    assert [line.split()[:2] for line in lines] == [
        ["getitem", "CacheError"],
        ["get_batch", "CacheError"],
    ], done.stdout
    assert "index cache" in lines[0] and "delete" in lines[0]

"""A child process that writes ``n`` tiny prefixes, builds a blend of all of them in 3
splits under ``ulimit -n 1024`` and reads a sample of every low-level dataset, then
prints what it saw as JSON (tests/format/test_bin_pool_limits.py)."""

from __future__ import annotations

import json
import os
import resource
import sys

import numpy

from tokenloom.builder import BlendedMegatronDatasetBuilder
from tokenloom.datasets import GPTDataset, GPTDatasetConfig, SimpleTokenizer
from tokenloom.format import IndexedDatasetBuilder
from tokenloom.format._mapping import MAPS
from tokenloom.format.bin_pool import BIN_POOL


def write(root: str, n: int) -> tuple[list[str], numpy.ndarray]:
    """``n`` pairs of 3 documents of 40 tokens (one .idx, copied; distinct .bin files)."""
    template = os.path.join(root, "template")
    builder = IndexedDatasetBuilder(template + ".bin", dtype=numpy.uint16)
    for _ in range(3):
        builder.add_item(numpy.arange(1, 41))
        builder.end_document()
    builder.finalize(template + ".idx")
    with open(template + ".idx", "rb") as handle:
        idx = handle.read()
    tokens = numpy.random.default_rng(0).integers(1, 999, (n, 120), dtype=numpy.uint16)
    prefixes = []
    for i in range(n):
        prefix = os.path.join(root, f"p{i:05d}")
        tokens[i].tofile(prefix + ".bin")
        with open(prefix + ".idx", "wb") as handle:
            handle.write(idx)
        prefixes.append(prefix)
    return prefixes, tokens


def main(root: str, n: int, pool: int) -> None:
    """Build, serve one sample of each dataset (checked against the written tokens)."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(1024, hard), hard))
    prefixes, tokens = write(root, n)
    config = GPTDatasetConfig(
        random_seed=1,
        sequence_length=16,
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        split="34,33,33",
        tokenizer=SimpleTokenizer(1000, 0),
        path_to_cache=os.path.join(root, "cache"),
        blend=(prefixes, None),
        max_open_bin_files=pool,
    )
    splits = BlendedMegatronDatasetBuilder(GPTDataset, [n, n // 2, n // 2], lambda: True, config)
    built = splits.build()
    position = {p: i for i, p in enumerate(prefixes)}
    wrong = peak_pool = peak_fds = 0
    for blended in built:
        for dataset in blended.datasets:
            sample = dataset[0]["tokens"]
            whole = tokens[position[dataset.dataset.path_prefix]].astype(numpy.int64)
            found = any((whole[k : k + 16] == sample).all() for k in range(len(whole) - 15))
            wrong += not found
            peak_pool = max(peak_pool, len(BIN_POOL))
        for i in range(0, len(blended), max(1, len(blended) // 300)):
            blended[i]
        peak_fds = max(peak_fds, len(os.listdir("/proc/self/fd")))
    report = dict(
        datasets=sum(len(b.datasets) for b in built),
        wrong=wrong,
        peak_pool=peak_pool,
        peak_fds=peak_fds,
        live_maps=MAPS.live,
        refused=MAPS.refused,
        limit=resource.getrlimit(resource.RLIMIT_NOFILE)[0],
    )
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))

"""The .bin pool's cost on ``dataset[i]``: one tree against another, same corpus.

Run from the repository root::

    python benchmarks/bench_pool.py --old /path/to/old/src --new src [--seq 4096,256]

Each tree serves the same random ``dataset[i]`` (train ``GPTDataset`` over one corpus,
kernel path, the pool at its default bound) in its own child process; the trees take
turns, ``--rounds`` times, and the best round of each counts. Prints one line per
sequence length with both times per sample, the ratio, and this machine's fd limit.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile

CHILD = r"""
import json, sys, time
import numpy
from tokenloom.builder import BlendedMegatronDatasetBuilder
from tokenloom.datasets import GPTDataset, GPTDatasetConfig, SimpleTokenizer
from tokenloom.format import IndexedDatasetBuilder
from tokenloom.kernels import KERNELS
root, seq, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
config = GPTDatasetConfig(random_seed=1, sequence_length=seq, reset_position_ids=False,
    reset_attention_mask=False, eod_mask_loss=False, split="100,0,0",
    tokenizer=SimpleTokenizer(32000, 0), path_to_cache=root + "/cache-" + sys.argv[4],
    blend=([root + "/corpus"], None))
ds = BlendedMegatronDatasetBuilder(GPTDataset, [None, 0, 0], lambda: True, config).build()[0]
ds = ds.datasets[0] if hasattr(ds, "datasets") else ds
indices = numpy.random.default_rng(7).integers(0, len(ds), n).tolist()
ds[indices[0]]; KERNELS.join(); ds[indices[0]]
best = float("inf")
for _ in range(5):
    t = time.perf_counter()
    for i in indices:
        ds[i]
    best = min(best, (time.perf_counter() - t) / n)
print(json.dumps(best))
"""


def _corpus(root: str, tokens: int) -> None:
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
    import numpy

    from tokenloom.format import IndexedDatasetBuilder

    rng = numpy.random.default_rng(0)
    builder = IndexedDatasetBuilder(os.path.join(root, "corpus.bin"), dtype=numpy.uint16)
    done = 0
    while done < tokens:
        length = int(rng.integers(50, 3000))
        builder.add_item(rng.integers(1, 32000, length))
        builder.end_document()
        done += length
    builder.finalize(os.path.join(root, "corpus.idx"))


def _time(src: str, root: str, seq: int, n: int, tag: str) -> float:
    env = dict(os.environ, PYTHONPATH=os.path.abspath(src))
    out = subprocess.run(
        [sys.executable, "-c", CHILD, root, str(seq), str(n), tag],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    if out.returncode:
        raise RuntimeError(f"{src}: the timing child failed:\n{out.stderr[-3000:]}")
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    """Parse the flags, time both trees, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", required=True, help="src folder of the tree without the pool")
    parser.add_argument("--new", default="src", help="src folder of the tree with the pool")
    parser.add_argument("--seq", default="4096,256", help="sequence lengths, comma separated")
    parser.add_argument("--samples", type=int, default=20000, help="dataset[i] calls per round")
    parser.add_argument("--tokens", type=int, default=20_000_000, help="corpus size in tokens")
    parser.add_argument("--rounds", type=int, default=3, help="turns each tree takes")
    args = parser.parse_args()
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)
    print(f"fd limit (soft, hard): {limit}; cores: {os.cpu_count()}")
    with tempfile.TemporaryDirectory() as root:
        _corpus(root, args.tokens)
        for seq in (int(s) for s in args.seq.split(",")):
            best = {"old": float("inf"), "new": float("inf")}
            for _ in range(args.rounds):
                for tag, src in (("old", args.old), ("new", args.new)):
                    best[tag] = min(best[tag], _time(src, root, seq, args.samples, tag))
            ratio = best["new"] / best["old"]
            print(
                f"seq {seq}: old {best['old'] * 1e6:.2f} us/sample, new "
                f"{best['new'] * 1e6:.2f} us/sample, new/old {ratio:.3f}"
            )


if __name__ == "__main__":
    main()

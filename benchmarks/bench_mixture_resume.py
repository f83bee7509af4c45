"""Resume after a mixture change vs a plain resume (issue 20 §1: < 1 s beyond it).

``python benchmarks/bench_mixture_resume.py --consumed 10000000`` is the issue's size.
Real ``.bin``/``.idx`` corpora (``--sources`` of them, written once under ``--root``)
and GPT blends built through the builder (their index caches are built on the first run
and hit afterwards, as in a restarted job). The old blend holds ``consumed + 1M``
samples; the new one reweights the sources, removes the last and adds one, and holds
``consumed + --after`` samples. Each turn is what a restarted job does, timed, best of
``--repeat`` alternating turns: build the train blend (from the warm index cache) +
``build_pretraining_data_loader`` + ``load_state_dict`` + the first batch + a
``state_dict()`` (a checkpoint):

* plain: the old blend, its own state;
* change: the new blend, the old state with ``allow_mixture_change=True`` (rebuilds the
  continuing sources' saved datasets from the index cache and the continued blend).

The loader part alone (without the blend build) is printed too.
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path
from typing import Any

import numpy

from tokenloom.builder import BlendedMegatronDatasetBuilder
from tokenloom.datasets import GPTDataset, GPTDatasetConfig
from tokenloom.format import IndexedDatasetBuilder
from tokenloom.training import build_pretraining_data_loader

SEQ, MBS = 64, 4


def _corpus(prefix: Path, documents: int, seed: int) -> str:
    if not Path(f"{prefix}.idx").exists():
        rng = numpy.random.default_rng(seed)
        builder = IndexedDatasetBuilder(f"{prefix}.bin", dtype=numpy.uint16)
        for length in rng.integers(20, 400, documents):
            tokens = rng.integers(3, 30000, length)
            tokens[-1] = 2
            builder.add_item(tokens)
            builder.end_document()
        builder.finalize(f"{prefix}.idx")
    return str(prefix)


def _blend(prefixes: list[str], weights: list[float], samples: int, cache: Path) -> Any:
    config = GPTDatasetConfig(
        random_seed=1234,
        sequence_length=SEQ,
        blend=(prefixes, weights),
        split="100,0,0",
        tokenizer={"vocab_size": 32000, "eod": 2},
        path_to_cache=str(cache),
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
    )
    train, _, _ = BlendedMegatronDatasetBuilder(
        GPTDataset, [samples, 0, 0], lambda: True, config
    ).build()
    return train


def _resume(build: Any, state: dict, change: bool) -> tuple[float, float]:
    start = time.perf_counter()
    dataset = build()
    built = time.perf_counter()
    loader = build_pretraining_data_loader(dataset, 0, micro_batch_size=MBS)
    loader.load_state_dict(state, allow_mixture_change=change)
    next(iter(loader))
    loader.state_dict()
    end = time.perf_counter()
    return end - start, end - built


def main() -> None:
    """Print the plain and the changed resume times (best of the turns) and the gap."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--consumed", type=int, default=1_000_000)
    parser.add_argument("--sources", type=int, default=8)
    parser.add_argument("--documents", type=int, default=20_000)
    parser.add_argument("--after", type=int, default=2_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--root", default="/tmp/tokenloom-bench-mixture")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    root = Path(args.root)
    root.mkdir(parents=True, exist_ok=True)
    names = [_corpus(root / f"s{i}", args.documents, i) for i in range(args.sources + 1)]
    old_weights = [float(i + 1) for i in range(args.sources)]
    new_weights = [float(args.sources - i) for i in range(args.sources)]
    cache = root / "cache"
    consumed, after = args.consumed, args.after

    def old_blend() -> Any:
        return _blend(names[:-1], old_weights, consumed + 1_000_000, cache)

    def new_blend() -> Any:
        return _blend(names[:-2] + names[-1:], new_weights, consumed + after, cache)

    t0 = time.perf_counter()
    old, _ = old_blend(), new_blend()
    print(f"datasets built (or loaded) in {time.perf_counter() - t0:.1f} s")
    state = build_pretraining_data_loader(old, consumed, micro_batch_size=MBS).state_dict()
    del old
    turns: dict[str, list[tuple[float, float]]] = {"plain": [], "change": []}
    for _ in range(args.repeat):
        turns["plain"].append(_resume(old_blend, state, False))
        turns["change"].append(_resume(new_blend, state, True))
    print(f"consumed={consumed:,} after={after:,} sources={args.sources} (reweight, -1, +1)")
    for name, values in turns.items():
        total = ", ".join(f"{t:.3f}" for t, _ in values)
        print(
            f"{name:7s} best {min(t for t, _ in values):.3f} s (turns {total}); loader part "
            f"best {min(t for _, t in values):.3f} s"
        )
    gap = min(t for t, _ in turns["change"]) - min(t for t, _ in turns["plain"])
    print(f"beyond a plain resume: {gap:.3f} s")


if __name__ == "__main__":
    main()

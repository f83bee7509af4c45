"""Small real corpora and datasets for the training tests (public API only)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

import numpy

from tokenloom.builder import BlendedMegatronDatasetBuilder
from tokenloom.datasets import GPTDataset, GPTDatasetConfig
from tokenloom.format import IndexedDatasetBuilder

EOD = 2


def write_corpus(
    prefix: Path, documents: int, seed: int, vocab: int = 500, token_seed: Optional[int] = None
) -> str:
    """A real ``.bin``/``.idx`` pair of ``documents`` documents ending in EOD.

    The document lengths depend on ``seed`` alone; ``token_seed`` (default: the same
    stream) draws other tokens into documents of the same lengths, so the ``.idx`` is
    byte-identical and the ``.bin`` has the same size.
    """
    rng = numpy.random.default_rng(seed)
    lengths = rng.integers(3, 90, documents)
    if token_seed is not None:
        rng = numpy.random.default_rng(token_seed)
    builder = IndexedDatasetBuilder(f"{prefix}.bin", dtype=numpy.uint16)
    for length in lengths:
        tokens = rng.integers(3, vocab, length)
        tokens[-1] = EOD
        builder.add_item(tokens)
        builder.end_document()
    builder.finalize(f"{prefix}.idx")
    return str(prefix)


def build_train(
    prefixes: Sequence[str],
    cache: Path,
    samples: int,
    *,
    weights: Optional[list[float]] = None,
    sequence_length: int = 32,
    seed: int = 1234,
    split: str = "100,0,0",
    **overrides: Any,
) -> Any:
    """The train split of a (blended) GPT dataset with ``samples`` samples."""
    blend = (list(prefixes), weights)
    config = GPTDatasetConfig(
        random_seed=seed,
        sequence_length=sequence_length,
        blend=blend,
        split=split,
        tokenizer={"vocab_size": 500, "eod": EOD},
        path_to_cache=str(cache),
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        **overrides,
    )
    train, _, _ = BlendedMegatronDatasetBuilder(
        GPTDataset, [samples, 0, 0], lambda: True, config
    ).build()
    return train


class IndexDataset:
    """``length`` samples whose tokens all equal the sample's index (reveals the order)."""

    def __init__(self, length: int, sequence_length: int = 4) -> None:
        self.length, self.sequence_length = length, sequence_length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, idx: int) -> dict:
        row = numpy.full(self.sequence_length, int(idx), dtype=numpy.int64)
        return {
            "tokens": row,
            "labels": row + 1,
            "loss_mask": numpy.ones(self.sequence_length, numpy.float32),
            "position_ids": numpy.arange(self.sequence_length, dtype=numpy.int64),
        }

    def get_batch(self, indices: Sequence[int], out: Any = None) -> dict:
        rows = [self[i] for i in indices]
        if out is None:
            return {name: numpy.stack([r[name] for r in rows]) for name in rows[0]}
        for name in ("tokens", "labels", "loss_mask", "position_ids"):
            out[name][...] = numpy.stack([r[name] for r in rows])
        return out


class NoisyDataset:
    """Samples drawn from torch's global generator (augmentation-like randomness)."""

    def __init__(self, length: int) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, idx: int) -> dict:
        import torch

        tokens = torch.randint(0, 1000, (4,)).numpy()
        return {
            "tokens": tokens,
            "labels": tokens,
            "loss_mask": numpy.ones(4, numpy.float32),
            "position_ids": numpy.arange(4, dtype=numpy.int64),
        }


def seen(batch: Any) -> list:
    """The sample indices of an IndexDataset batch."""
    return batch["tokens"][:, :1].reshape(-1).tolist()

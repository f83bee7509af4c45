"""Mock GPT data: synthetic documents, no files (megatron-core's MockGPT* classes).

``MockGPTLowLevelDataset`` holds 100000 documents whose lengths are drawn from
``numpy.random.default_rng(0)`` in ``[1, 4096)``; document ``i`` of length ``n`` is
``1, 2, ..., n-1`` (modulo the vocabulary size) followed by the EOD token.
``MockGPTDataset`` is a ``GPTDataset`` over it, used when the config has no blend.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Optional

import numpy

from tokenloom.attributes import read_attribute
from tokenloom.datasets.config import GPTDatasetConfig
from tokenloom.datasets.gpt import GPTDataset
from tokenloom.datasets.split import Split
from tokenloom.errors import ConfigError

__all__ = ["MockGPTLowLevelDataset", "MockGPTDataset"]


class MockGPTLowLevelDataset:
    """Synthetic documents with megatron-core's exact lengths and token pattern."""

    seed: int = 0
    """The fixed seed of the length generator."""

    size: int = 100000
    """The number of documents."""

    max_sequence_length: int = 4096
    """Lengths are drawn from ``[1, max_sequence_length)``."""

    def __init__(self, tokenizer: Any) -> None:
        self.vocab_size = tokenizer.vocab_size
        self.eod_token = tokenizer.eod
        if self.vocab_size is None:
            raise ConfigError("the mock dataset needs tokenizer.vocab_size (it is None)")
        rng = numpy.random.default_rng(seed=self.seed)
        self.sequence_lengths = rng.integers(
            low=1, high=self.max_sequence_length, size=self.size, dtype=numpy.int32
        )

    @property
    def unique_identifiers(self) -> OrderedDict[str, Any]:
        """Everything the mock documents depend on (used in cache keys)."""
        return OrderedDict(
            [
                ("class", type(self).__name__),
                ("seed", self.seed),
                ("size", self.size),
                ("max_sequence_length", self.max_sequence_length),
                ("vocab_size", self.vocab_size),
                ("eod", self.eod_token),
            ]
        )

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, idx: int) -> numpy.ndarray:
        return self.get(idx)

    def get(self, idx: int, offset: int = 0, length: Optional[int] = None) -> numpy.ndarray:
        """Tokens ``[offset, offset + length)`` of document ``idx`` (int64)."""
        size = int(self.sequence_lengths[idx])
        if length is None:
            length = size - offset
        if offset < 0 or length < 0 or offset + length > size:
            raise IndexError(
                f"mock document {idx} has {size} tokens; cannot read "
                f"offset={offset} length={length}"
            )
        tokens: numpy.ndarray = (
            numpy.arange(offset, offset + length, dtype=numpy.int64) + 1
        ) % self.vocab_size
        if length and offset + length == size:
            tokens[-1] = self.eod_token
        return tokens


class MockGPTDataset(GPTDataset):
    """A GPTDataset over :class:`MockGPTLowLevelDataset` (config must be mock)."""

    def __init__(
        self,
        dataset: MockGPTLowLevelDataset,
        dataset_path: Optional[str],
        indices: Optional[numpy.ndarray],
        num_samples: Optional[int],
        index_split: Split,
        config: GPTDatasetConfig,
        *,
        build_if_missing: bool = True,
    ) -> None:
        if not read_attribute(config, "mock", False):
            raise ConfigError(
                "MockGPTDataset needs a mock config: give neither blend nor blend_per_split"
            )
        super().__init__(
            dataset,
            dataset_path,
            indices,
            num_samples,
            index_split,
            config,
            build_if_missing=build_if_missing,
        )

    @staticmethod
    def numel_low_level_dataset(low_level_dataset: MockGPTLowLevelDataset) -> int:
        """Number of documents of the mock low-level dataset (Megatron's hook)."""
        return len(low_level_dataset)

    @staticmethod
    def build_low_level_dataset(  # type: ignore[override]  # a stand-in for IndexedDataset
        dataset_path: Optional[str], config: GPTDatasetConfig
    ) -> MockGPTLowLevelDataset:
        """The mock low-level dataset for ``config`` (``dataset_path`` is ignored)."""
        return MockGPTLowLevelDataset(config.tokenizer)

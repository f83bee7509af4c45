"""``MegatronDataset``: the base of the mid-level datasets (GPTDataset, ...).

It records what identifies a dataset (megatron-core's ``unique_identifiers``,
``unique_description`` and ``unique_description_hash``, byte for byte) and resolves the
pad token id. ``cache_identifiers`` extends Megatron's identifiers with every other
input that shapes the cached indices; it is what :mod:`tokenloom.cache` keys on.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from abc import ABC, abstractmethod
from collections import OrderedDict
from typing import Any, Optional

import numpy

from tokenloom.attributes import read_attribute
from tokenloom.datasets.config import BlendedMegatronDatasetConfig
from tokenloom.datasets.split import Split
from tokenloom.errors import ConfigError
from tokenloom.format.bin_pool import BIN_POOL

__all__ = [
    "MegatronDataset",
    "PAD_TOKEN_ID",
    "checked_num_samples",
    "resolve_pad_token_id",
    "tokenizer_identity",
]

PAD_TOKEN_ID = -1
"""Pad id used when the tokenizer has none: guaranteed absent from token data."""

# Not a torch.utils.data.Dataset subclass on purpose: a map-style dataset only
# needs __len__/__getitem__ for DataLoader, and the core (numpy only) must not import
# torch.


class MegatronDescription:
    """megatron-core's ``unique_description`` and its MD5, from ``unique_identifiers``.

    megatron-core computes both in ``__init__``; here they are computed on first
    access (tokenloom's caches key on ``cache_identifiers`` instead).
    """

    unique_identifiers: OrderedDict[str, Any]

    @property
    def unique_description(self) -> str:
        """megatron-core's description: ``unique_identifiers`` as JSON, indent 4."""
        text = self.__dict__.get("_unique_description")
        if text is None:
            text = json.dumps(self.unique_identifiers, indent=4, default=_megatron_default)
            self.__dict__["_unique_description"] = text
        return text

    @property
    def unique_description_hash(self) -> str:
        """MD5 hex digest of :attr:`unique_description` (megatron-core's)."""
        return hashlib.md5(
            self.unique_description.encode("utf-8"), usedforsecurity=False
        ).hexdigest()


class MegatronDataset(MegatronDescription, ABC):
    """Mid-level dataset over a low-level dataset (megatron-core's MegatronDataset).

    Args:
        dataset: the low-level dataset (an ``IndexedDataset`` or a mock).
        dataset_path: the real path prefix on disk, for bookkeeping (None for mocks).
        indices: the element (document) ids this split exposes, or None under
            ``fast_cache_load`` (then the indices must come from the cache).
        num_samples: the minimum number of samples to build; None for one epoch.
        index_split: the split these indices belong to.
        config: the config.
    """

    def __init__(
        self,
        dataset: Any,
        dataset_path: Optional[str],
        indices: Optional[numpy.ndarray],
        num_samples: Optional[int],
        index_split: Split,
        config: BlendedMegatronDatasetConfig,
    ) -> None:
        if not isinstance(index_split, Split):
            raise ConfigError(f"index_split={index_split!r}: must be a tokenloom Split member")
        self.dataset = dataset
        self.dataset_path = dataset_path
        self.indices = indices
        self.num_samples = checked_num_samples(num_samples)
        self.index_split = index_split
        self.config = config
        bound = read_attribute(config, "max_open_bin_files", None)
        if bound is not None:  # GPTDatasetConfig's: the process-wide .bin pool's bound
            BIN_POOL.resize(bound)

        self.unique_identifiers: OrderedDict[str, Any] = OrderedDict()
        self.unique_identifiers["class"] = type(self).__name__
        self.unique_identifiers["dataset_path"] = self.dataset_path
        self.unique_identifiers["num_samples"] = self.num_samples
        self.unique_identifiers["index_split"] = self.index_split.name
        for attr in self._key_config_attributes():
            self.unique_identifiers[attr] = getattr(self.config, attr)
        self._pad_token_id = resolve_pad_token_id(
            config.tokenizer, config.allow_ambiguous_pad_tokens
        )

    @property
    def cache_identifiers(self) -> OrderedDict[str, Any]:
        """Megatron's identifiers plus every other input that shapes the indices."""
        return OrderedDict(self.unique_identifiers)

    @staticmethod
    def numel_low_level_dataset(low_level_dataset: Any) -> int:
        """Number of elements of the low-level dataset that splits are cut from."""
        raise NotImplementedError

    @staticmethod
    def build_low_level_dataset(dataset_path: str, config: Any) -> Any:
        """Open the low-level dataset at ``dataset_path``; ``config`` is the subclass's own
        :class:`BlendedMegatronDatasetConfig` subclass (each dataset takes its own)."""
        raise NotImplementedError

    @staticmethod
    def _key_config_attributes() -> list[str]:
        """Config attributes in megatron-core's description (and cache key)."""
        return ["random_seed", "sequence_length", "split", "split_matrix", "tokenizer"]

    @abstractmethod
    def __len__(self) -> int:
        """Number of samples."""

    @abstractmethod
    def __getitem__(self, idx: Optional[int]) -> dict[str, numpy.ndarray]:
        """One sample as a dict of arrays."""


def checked_num_samples(num_samples: Any) -> Optional[int]:
    """``num_samples`` as an int (None stays None); ConfigError unless an integer >= 0."""
    if num_samples is not None and (
        isinstance(num_samples, bool)
        or not isinstance(num_samples, (int, numpy.integer))
        or num_samples < 0
    ):
        raise ConfigError(f"num_samples={num_samples!r}: must be None or an integer >= 0")
    return None if num_samples is None else int(num_samples)


def tokenizer_identity(tokenizer: Any) -> Any:
    """``tokenizer.unique_identifiers`` (megatron-core's rule), else a stable summary of
    the ids the datasets use."""
    identifiers = read_attribute(tokenizer, "unique_identifiers", None)
    if identifiers is not None or tokenizer is None:
        return identifiers
    summary: OrderedDict[str, Any] = OrderedDict([("class", type(tokenizer).__name__)])
    for name in ("vocab_size", "eod", "pad"):
        try:
            summary[name] = getattr(tokenizer, name)
        except Exception:  # megatron tokenizers raise NotImplementedError for absent ids
            summary[name] = None
    return summary


def _megatron_default(obj: Any) -> Any:
    """JSON fallback of the megatron-compatible description."""
    if isinstance(obj, numpy.generic):
        return obj.item()
    return tokenizer_identity(obj)


def _special_tokens(tokenizer: Any) -> list[Any]:
    try:
        tokens = [v for k, v in tokenizer.special_tokens_dict.items() if k != "pad_token"]
    except Exception:  # noqa: BLE001 - any read that raises means "no special tokens"
        tokens = []
    if not tokens:
        for name in ("eos", "eod"):
            try:
                tokens.append(getattr(tokenizer, name))
            except Exception:  # noqa: BLE001 - megatron-core's rule: a read that raises is absent
                pass
    return tokens


def resolve_pad_token_id(tokenizer: Any, allow_ambiguous: Optional[bool]) -> int:
    """The pad id samples use: the tokenizer's, or -1 when it has none or it collides
    with another special token (unless ``allow_ambiguous``), as megatron-core does."""
    try:
        pad = tokenizer.pad
    except Exception:  # megatron-core's rule: a tokenizer whose pad raises has no pad
        pad = None
    if pad is None:
        return PAD_TOKEN_ID
    if pad in _special_tokens(tokenizer):
        if allow_ambiguous:
            warnings.warn(
                "The pad token id collides with another special token id; it is "
                "still masked because allow_ambiguous_pad_tokens=True.",
                stacklevel=3,
            )
            return int(pad)
        warnings.warn(
            "The pad token id collides with another special token id; pad tokens "
            "present in the data will not be masked. Use a tokenizer with a unique "
            "pad id to silence this.",
            stacklevel=3,
        )
        return PAD_TOKEN_ID
    return int(pad)

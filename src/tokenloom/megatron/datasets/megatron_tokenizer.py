"""``megatron.core.datasets.megatron_tokenizer``: the legacy tokenizer interface.

:class:`MegatronLegacyTokenizer` is megatron-core 0.16.1's abstract tokenizer (Megatron-LM's
``megatron/training/tokenizer`` subclasses it): ``tokenize``, ``vocab``,
``inv_vocab`` and ``vocab_size`` are abstract; every special token and
``detokenize``/``offsets`` raise ``NotImplementedError`` until a subclass provides them,
as Megatron's do (tokenloom reads them with :mod:`tokenloom.attributes`, so a raise means
"absent"). ``MegatronTokenizer`` is its older name (megatron-core before 0.11).
"""

from __future__ import annotations

import json
import logging
from abc import ABC, abstractmethod
from collections import OrderedDict
from typing import Any

import numpy

__all__ = ["MegatronLegacyTokenizer", "MegatronTokenizer"]

logger = logging.getLogger(__name__)


def _absent(tokenizer: object, what: str) -> NotImplementedError:
    return NotImplementedError(f"{type(tokenizer).__name__} has no {what}")


class MegatronLegacyTokenizer(ABC):
    """Abstract tokenizer; ``unique_identifiers`` records the class, paths and options.

    Args:
        tokenizer_paths: the files the tokenizer is built from.
        tokenizer_options: its options.
    """

    def __init__(self, *tokenizer_paths: str, **tokenizer_options: Any):
        self.unique_identifiers: OrderedDict[str, Any] = OrderedDict()
        self.unique_identifiers["class"] = type(self).__name__
        self.unique_identifiers["tokenizer_path"] = list(tokenizer_paths)
        for option in tokenizer_options:
            self.unique_identifiers[option] = str(tokenizer_options[option])
        self.unique_description = json.dumps(self.unique_identifiers, indent=4)
        super().__init__()

    @abstractmethod
    def tokenize(self, text: str) -> numpy.ndarray:
        """Token ids of ``text``."""

    def detokenize(self, ids: numpy.ndarray) -> str:
        """Text of ``ids`` (a subclass provides it)."""
        raise _absent(self, "method 'detokenize'")

    def offsets(self, ids: list[int], text: str) -> list[int]:
        """Character offset in ``text`` where each of ``ids`` starts (a subclass provides it)."""
        raise _absent(self, "method 'offsets'")

    @property
    @abstractmethod
    def vocab(self):
        """Token text -> id."""

    @property
    @abstractmethod
    def inv_vocab(self):
        """Id -> token text."""

    @property
    @abstractmethod
    def vocab_size(self):
        """Number of ids."""

    @property
    def cls(self):
        """The CLS id (a subclass provides it)."""
        raise _absent(self, "attribute 'cls'")

    @property
    def sep(self):
        """The SEP id (a subclass provides it)."""
        raise _absent(self, "attribute 'sep'")

    @property
    def pad(self):
        """The pad id (a subclass provides it)."""
        raise _absent(self, "attribute 'pad'")

    @property
    def eod(self):
        """The end-of-document id (a subclass provides it)."""
        raise _absent(self, "attribute 'eod'")

    @property
    def bos(self):
        """The beginning-of-sequence id (a subclass provides it)."""
        raise _absent(self, "attribute 'bos'")

    @property
    def eos(self):
        """The end-of-sequence id (a subclass provides it)."""
        raise _absent(self, "attribute 'eos'")

    @property
    def mask(self):
        """The mask id (a subclass provides it)."""
        raise _absent(self, "attribute 'mask'")


MegatronTokenizer = MegatronLegacyTokenizer
"""megatron-core's name for :class:`MegatronLegacyTokenizer` before 0.11."""


def tokenizer_base() -> type:
    """megatron-core's ``MegatronTokenizerBase`` where megatron-core is installed, else
    :class:`MegatronLegacyTokenizer` (the names are annotations in megatron-core)."""
    try:
        from megatron.core.tokenizers import MegatronTokenizerBase
    except Exception:  # noqa: BLE001 - not installed, or its import fails here
        return MegatronLegacyTokenizer
    return MegatronTokenizerBase

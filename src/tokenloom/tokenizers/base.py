"""The tokenizer protocol shared by ``tokenloom preprocess``, the demo and the datasets.

A tokenizer is anything with ``vocab_size``, ``eod``, ``pad`` (``None`` when the
vocabulary has no padding token), ``unique_identifiers`` (a JSON-serialisable dict
that goes into index-cache descriptions, as in megatron-core) and the two methods
``encode_batch(texts) -> list of int arrays`` and ``decode(ids) -> str``.  Such an
object can be passed as ``tokenizer`` to :class:`tokenloom.datasets.GPTDatasetConfig`.

:class:`BaseTokenizer` implements the protocol on top of one hook,
``_encode_lists(texts) -> list of lists of ids``, which each backend maps onto its
library's batch fast path (or on ``_encode_native``/``_flat_from_native`` where the
library's own output converts faster).  It adds :meth:`BaseTokenizer.encode_batch_flat`
(one flat array plus per-document lengths) and
:meth:`BaseTokenizer.encode_batch_deferred`, the form the preprocessing pipeline uses
(the library call now, the conversion to arrays later, in another thread),
megatron-style aliases (``tokenize``, ``detokenize``, ``eos``,
``unique_description``) and pickling that reloads the tokenizer from its file, so
tokenizers travel to worker processes and data-loader workers.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, Optional, Protocol, runtime_checkable

import numpy

from tokenloom.errors import TokenizerError

# ids are produced as int32: every vocabulary in use fits, and it halves memory vs int64
ID_DTYPE = numpy.int32
FlatIds = tuple[numpy.ndarray, numpy.ndarray]  # (flat ids, per-text lengths)


@runtime_checkable
class Tokenizer(Protocol):
    """What tokenloom needs from a tokenizer (see the module docstring)."""

    vocab_size: int
    eod: Optional[int]
    pad: Optional[int]
    unique_identifiers: dict[str, Any]

    def encode_batch(self, texts: Sequence[str]) -> list[numpy.ndarray]:
        """Encode each text to a 1-D integer array (no special tokens added)."""

    def decode(self, ids) -> str:
        """Turn ids back into text."""


def file_sha256(path: str) -> str:
    """Hex SHA-256 of a file's bytes (identifies a tokenizer model in cache descriptions)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_model_file(path: str, kind: str, hint: str) -> str:
    """Return the absolute path of an existing tokenizer file or raise TokenizerError."""
    path = os.path.abspath(os.fspath(path))
    if not os.path.isfile(path):
        raise TokenizerError(f"{kind} tokenizer file {path} does not exist; {hint}")
    return path


def lists_to_flat(id_lists: list[list[int]]) -> tuple[numpy.ndarray, numpy.ndarray]:
    """Concatenate id lists into (flat int32 array, int64 lengths), no Python loop per id."""
    lengths = numpy.fromiter(map(len, id_lists), dtype=numpy.int64, count=len(id_lists))
    flat = numpy.empty(int(lengths.sum()), dtype=ID_DTYPE)
    start = 0
    for ids in id_lists:  # slice assignment converts a whole list in C
        stop = start + len(ids)
        flat[start:stop] = ids
        start = stop
    return flat, lengths


def split_flat(flat: numpy.ndarray, lengths: numpy.ndarray) -> list[numpy.ndarray]:
    """Views of ``flat`` cut at ``lengths`` (the inverse of :func:`lists_to_flat`)."""
    if lengths.shape[0] == 0:
        return []
    return numpy.split(flat, numpy.cumsum(lengths[:-1]))


class BaseTokenizer:
    """Common machinery; subclasses set the attributes and implement ``_encode_lists``/``decode``.

    Subclasses call ``_finish_init(init_kwargs, identifiers)`` at the end of ``__init__``.
    """

    vocab_size: int
    eod: Optional[int] = None
    pad: Optional[int] = None
    unique_identifiers: dict[str, Any]

    # -- encoding ---------------------------------------------------------------------
    def _encode_lists(self, texts: Sequence[str]) -> list[list[int]]:
        raise NotImplementedError

    def _encode_native(self, texts: list[str]) -> Any:
        """The library's batch call; its output goes to :meth:`_flat_from_native`."""
        return self._encode_lists(texts)

    def _flat_from_native(self, native: Any) -> tuple[numpy.ndarray, numpy.ndarray]:
        return lists_to_flat(native)

    def encode_batch_deferred(self, texts: Sequence[str]) -> Callable[[], FlatIds]:
        """Encode ``texts`` now; return a function that builds the (flat, lengths) arrays.

        The encoding runs in the library (with the GIL released); the returned function
        does the Python-side conversion of its output (id lists to one array), so that a
        pipeline can run it in another thread while the next batch encodes.
        """
        return functools.partial(self._flat_from_native, self._encode_native(list(texts)))

    def encode_batch_flat(self, texts: Sequence[str]) -> FlatIds:
        """Encode ``texts`` through the library's batch path: (flat int32 ids, int64 lengths)."""
        return self.encode_batch_deferred(texts)()

    def encode_batch(self, texts: Sequence[str]) -> list[numpy.ndarray]:
        """Encode each text to a 1-D int32 array (no special tokens added)."""
        flat, lengths = self.encode_batch_flat(texts)
        return split_flat(flat, lengths)

    def encode(self, text: str) -> numpy.ndarray:
        """Encode one text."""
        return self.encode_batch([text])[0]

    def decode(self, ids) -> str:
        """The text of ``ids`` (adapters that can decode override this)."""
        raise NotImplementedError

    @staticmethod
    def _id_list(ids) -> list[int]:
        return [int(i) for i in numpy.asarray(ids).reshape(-1)]

    # -- megatron-style aliases ---------------------------------------------------------
    def tokenize(self, text: str) -> numpy.ndarray:
        """Alias of :meth:`encode` (megatron's tokenizer method name)."""
        return self.encode(text)

    def detokenize(self, ids) -> str:
        """Alias of :meth:`decode` (megatron's tokenizer method name)."""
        return self.decode(ids)

    @property
    def eos(self) -> Optional[int]:
        """The end-of-document id under megatron's other name."""
        return self.eod

    def special_tokens(self) -> dict[str, int]:
        """Special tokens (text -> id) this tokenizer knows; backends override it."""
        return {}

    def identity(self) -> dict[str, Any]:
        """What identifies this tokenizer, JSON-ready: ``kind`` (the class), ``files`` and
        their ``sha256``, ``vocab_size``, ``eod``, ``pad``, ``special_tokens`` (text -> id)
        and the settings that change its ids (``add_special_tokens``, ``add_bos``, ...).

        Two tokenizers with equal identities give the same ids for every text; a sidecar
        or a merge check can store and compare it.
        """
        identity: dict[str, Any] = {"kind": type(self).__name__}
        for name, value in self.unique_identifiers.items():
            if name == "class":
                continue
            identity["files" if name == "tokenizer_path" else name] = value
        identity["special_tokens"] = dict(self.special_tokens())
        return identity

    @property
    def unique_description(self) -> str:
        """``unique_identifiers`` as indented JSON, as megatron tokenizers expose it."""
        return json.dumps(self.unique_identifiers, indent=4)

    # -- construction, pickling, display -------------------------------------------------
    def _finish_init(self, init_kwargs: dict[str, Any], identifiers: dict[str, Any]) -> None:
        self._init_kwargs = dict(init_kwargs)
        ids = OrderedDict(identifiers)
        ids["vocab_size"] = int(self.vocab_size)
        ids["eod"] = self.eod
        ids["pad"] = self.pad
        self.unique_identifiers = ids

    def __getstate__(self) -> dict[str, Any]:
        return {"init_kwargs": self._init_kwargs}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state["init_kwargs"])  # type: ignore[misc]

    def __repr__(self) -> str:
        path = self.unique_identifiers.get("tokenizer_path")
        parts = [repr(path[0])] if path else []
        parts += [f"vocab_size={self.vocab_size}", f"eod={self.eod}", f"pad={self.pad}"]
        return f"{type(self).__name__}({', '.join(parts)})"


__all__ = [
    "Tokenizer",
    "BaseTokenizer",
    "ID_DTYPE",
    "file_sha256",
    "check_model_file",
    "lists_to_flat",
    "split_flat",
]

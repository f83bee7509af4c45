"""Turning one row of the GPT indices into a sample dict: megatron-core's fields.

``SampleMaker`` turns tokens gathered by a :class:`~tokenloom.datasets._tokens.TokenSource`
into megatron-core's fields (tokens, labels, loss_mask, position_ids, optional
attention_mask and cu_seqlens) with vectorised numpy and precomputed constants: the
general, readable path. :meth:`SampleMaker.bind` picks, once per set of index arrays,
the function that serves ``dataset[idx]``, as :mod:`tokenloom.index.dispatch` says: the
numba kernel ``fill_sample`` (:func:`tokenloom.datasets._fast_sample.fast_fetch`)
whenever it can produce every field asked for, else the general path
(:func:`general_fetch`). Property tests prove they agree. Before binding, the index
arrays are checked against the dataset's documents
(:func:`tokenloom.index.validate.check_gpt_indices`), so no path reads outside the
``.bin`` whatever a cache entry holds.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy

from tokenloom.attributes import read_attribute
from tokenloom.datasets._fast_sample import Fetch, fast_fetch
from tokenloom.datasets._tokens import Array, TokenSource
from tokenloom.datasets.masks import (
    causal_attention_mask,
    document_boundaries,
    inter_document_fields,
    ltor_masks_and_position_ids,
)
from tokenloom.errors import ConfigError
from tokenloom.index import dispatch
from tokenloom.index.bijection import BijectionShuffle
from tokenloom.index.validate import check_gpt_indices, sample_position
from tokenloom.kernels import read_only

__all__ = [
    "Fetch",
    "SampleMaker",
    "TokenSource",
    "general_fetch",
    "sample_position",
]

_UNBOUND = object()  # what ``SampleMaker.bound`` is before the first ``bind``


class SampleMaker:
    """Builds sample dicts for one GPTDataset (constants computed once)."""

    def __init__(self, config: Any, pad: int, source: TokenSource) -> None:
        self.config = config
        self.seq: int = config.sequence_length
        self.extra = int(config.add_extra_token_to_sequence)
        self.pad = pad
        self.eod: Any = config.tokenizer.eod
        self.pad_in_data = source.may_contain(pad)
        self.inter_document = bool(config.inter_document_masking)
        self.wants_parts = bool(config.return_cu_seqlens) or self.inter_document
        self.cacheable = not (
            config.reset_position_ids or config.reset_attention_mask or config.eod_mask_loss
        )
        self.positions = numpy.arange(self.seq, dtype=numpy.int64)
        self.ones = numpy.ones(self.seq, dtype=numpy.float32)
        self.causal: Optional[Array] = None
        self.bound: object = _UNBOUND  # the index arrays ``fetch`` was bound to (``bind``)
        self.fetch: Optional[Fetch] = None
        self.checked: Optional[tuple[Array, ...]] = None  # see check_indices
        if config.create_attention_mask:
            try:
                self.causal = causal_attention_mask(self.seq)
            except MemoryError:
                raise ConfigError(
                    f"create_attention_mask=True with sequence_length={self.seq} needs a "
                    f"{self.seq}x{self.seq} mask, which does not fit in memory; set "
                    "create_attention_mask=False (the causal mask is implied)"
                ) from None
            self.causal.flags.writeable = False

    def split_text(self, text: Array) -> tuple[Array, Array]:
        """``(tokens, labels)`` from the ``seq + extra`` gathered tokens."""
        if self.extra:
            return text[:-1], text[1:].copy()
        labels = numpy.empty(self.seq, dtype=numpy.int64)
        labels[:-1] = text[1:]
        labels[-1] = self.pad
        return text, labels

    def masks(self, tokens: Array) -> tuple[Optional[Array], Array, Array]:
        """``(attention_mask, loss_mask, position_ids)`` of one sample."""
        if self.cacheable:
            return self.causal, self.ones.copy(), self.positions.copy()
        per_sample_attention = (  # none under inter_document_masking: no mask is given
            self.causal is not None
            and bool(self.config.reset_attention_mask)
            and not self.inter_document
        )
        attention, loss_mask, positions = ltor_masks_and_position_ids(
            tokens,
            self.eod,
            self.config.reset_position_ids,
            self.config.reset_attention_mask,
            self.config.eod_mask_loss,
            per_sample_attention,
        )
        return (attention if per_sample_attention else self.causal), loss_mask, positions

    def make(
        self, text: Array, filled: int, parts: Optional[Array], is_padding_sample: bool
    ) -> dict[str, Array]:
        """The sample dict (megatron-core's field names and dtypes) from the gathered
        ``text`` whose first ``filled`` tokens are data and the rest pad."""
        tokens, labels = self.split_text(text)
        attention, loss_mask, positions = self.masks(tokens)
        if self.pad_in_data or filled < text.shape[0] or not self.extra:
            is_pad = labels == self.pad
            loss_mask[is_pad] = 0.0
            labels[is_pad] = 0
            tokens[tokens == self.pad] = 0
        if is_padding_sample:
            loss_mask[:] = 0.0
        sample = {"tokens": tokens, "labels": labels}
        if self.inter_document and parts is not None:  # Megatron-LM main's layout
            cu_seqlens, max_seqlen, positions = inter_document_fields(parts, self.seq, self.extra)
            sample.update(loss_mask=loss_mask, position_ids=positions, cu_seqlens=cu_seqlens)
            sample["max_seqlen"] = max_seqlen
            return sample
        if self.config.create_attention_mask and attention is not None:
            sample["attention_mask"] = attention
        sample["loss_mask"] = loss_mask
        sample["position_ids"] = positions
        if self.config.return_cu_seqlens and parts is not None:
            if filled < text.shape[0]:
                parts = numpy.append(parts, text.shape[0] - filled)
            sample["cu_seqlens"], sample["max_seqlen"] = document_boundaries(parts, self.seq)
        return sample

    def make_from_text(
        self, text: Array, is_padding_sample: bool, lengths: Optional[Any] = None
    ) -> dict[str, Array]:
        """The sample dict from ``seq + extra`` tokens that a subclass's
        ``_query_document_sample_shuffle_indices`` returned (megatron-core's
        ``__getitem__``: every pad id is masked and zeroed, wherever it is), with the
        per-document token counts Megatron-LM main's hook returns third (``lengths``).
        With ``return_cu_seqlens`` the documents are the runs ending at each EOD token;
        ``inter_document_masking`` takes ``lengths``, as Megatron-LM main does."""
        text = numpy.array(text, dtype=numpy.int64)  # a copy: the fields are written
        if text.shape != (self.seq + self.extra,):
            raise ConfigError(
                f"_query_document_sample_shuffle_indices returned {text.shape[0] if text.ndim else 0}"
                f" tokens; sequence_length={self.seq} with add_extra_token_to_sequence="
                f"{bool(self.extra)} needs {self.seq + self.extra}"
            )
        parts = None
        if self.inter_document:
            parts = self.hook_lengths(lengths)
        elif self.config.return_cu_seqlens:
            ends = numpy.flatnonzero(text[: self.seq] == self.eod) + 1
            parts = numpy.diff(numpy.concatenate([[0], ends, [self.seq]])).astype(numpy.int64)
        return self.make(text, 0, parts, is_padding_sample)

    def hook_lengths(self, lengths: Optional[Any]) -> Array:
        """The hook's per-document token counts, checked (ConfigError if absent or bad)."""
        parts = None if lengths is None else numpy.asarray(lengths)
        if parts is None or parts.ndim != 1 or parts.dtype.kind not in "iu" or (parts < 0).any():
            raise ConfigError(
                "inter_document_masking=True needs the per-document token counts: "
                "_query_document_sample_shuffle_indices must return (tokens, document_ids, "
                f"document_lengths) as Megatron-LM main's does; its third item is {lengths!r}"
            )
        if int(parts.sum()) > self.seq + self.extra:
            raise ConfigError(
                f"_query_document_sample_shuffle_indices returned document_lengths summing to "
                f"{int(parts.sum())}, more than the {self.seq + self.extra} tokens of a sample"
            )
        return parts.astype(numpy.int64)

    def fast_path_applies(self, source: TokenSource) -> bool:
        """Whether ``fill_sample`` may serve this dataset
        (:func:`tokenloom.index.dispatch.sample_kernel_applies`)."""
        config = self.config
        return dispatch.sample_kernel_applies(
            source.tokens is not None,
            source.may_use_kernels,
            self.wants_parts,
            bool(config.create_attention_mask and config.reset_attention_mask),
            self.eod,
            self.pad,
        )

    def bind(
        self,
        source: TokenSource,
        document_index: Array,
        sample_index: Array,
        shuffle_index: Array,
        count: int,
        bound: object,
    ) -> Fetch:
        """Set (and return) ``self.fetch``: ``fetch(idx) -> sample dict`` over these
        indices (checked first, see :meth:`check_indices`); ``bound`` (the owner's
        index container) marks what it was bound to."""
        self.check_indices(source, document_index, sample_index, shuffle_index, count)
        make = fast_fetch if self.fast_path_applies(source) else general_fetch
        shuffle = shuffle_index
        if isinstance(shuffle_index, BijectionShuffle):  # fill_sample reads an array
            make = general_fetch  # rows computed per sample (reference, a few us)
        else:
            shuffle = read_only(shuffle_index)
        self.fetch = make(
            self, source, read_only(document_index), read_only(sample_index), shuffle, count
        )
        self.bound = bound
        return self.fetch

    def check_indices(
        self,
        source: TokenSource,
        document_index: Array,
        sample_index: Array,
        shuffle_index: Array,
        count: int,
    ) -> None:
        """Check the index arrays against ``source``'s documents once per set of arrays
        (CacheError when they do not fit, see :func:`check_gpt_indices`)."""
        arrays = (document_index, sample_index, shuffle_index)
        if self.checked is not None and all(a is b for a, b in zip(arrays, self.checked)):
            return
        check_gpt_indices(
            document_index,
            sample_index,
            shuffle_index,
            source.lengths,
            self.seq,
            self.extra,
            count,
            self.describe_indices(source),
        )
        self.checked = arrays

    def describe_indices(self, source: TokenSource) -> str:
        """Names the indices of this dataset in an error: its prefix and cache folder."""
        prefix = read_attribute(source.dataset, "path_prefix", type(source.dataset).__name__)
        folder = self.config.path_to_cache or f"{prefix}/cache"
        return f"the GPTDataset index cache in {folder} for {prefix}"

    def general_fetch(
        self,
        source: TokenSource,
        document_index: Array,
        sample_index: Array,
        shuffle_index: Array,
        count: int,
    ) -> Fetch:
        """:func:`general_fetch` of this maker (the kernel path's fallback)."""
        return general_fetch(self, source, document_index, sample_index, shuffle_index, count)

    def general_sample(
        self,
        source: TokenSource,
        document_index: Array,
        sample_index: Array,
        row: int,
        is_padding_sample: bool,
    ) -> dict[str, Array]:
        """Sample ``row`` of the sample index by the general (readable) path."""
        text = numpy.empty(self.seq + self.extra, dtype=numpy.int64)
        filled = source.gather(document_index, sample_index, row, self.extra, self.pad, text)
        parts = None
        if self.wants_parts:
            parts = source.part_lengths(document_index, sample_index, row, self.extra)
        return self.make(text, filled, parts, is_padding_sample)


def general_fetch(
    maker: SampleMaker,
    source: TokenSource,
    document_index: Array,
    sample_index: Array,
    shuffle_index: Array,
    count: int,
) -> Fetch:
    """``fetch(idx)`` by :meth:`SampleMaker.general_sample` (``None``: padding sample)."""

    def fetch(idx: Optional[int]) -> dict[str, Array]:
        row = shuffle_index.item(sample_position(0 if idx is None else idx, count))
        return maker.general_sample(source, document_index, sample_index, row, idx is None)

    return fetch

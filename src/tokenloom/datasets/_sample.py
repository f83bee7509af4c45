"""Turning one row of the GPT indices into a sample dict, fast.

``TokenSource`` reads token ranges of documents: straight numpy slices of the mmapped
``.bin`` (``IndexedDataset.tokens``) when available, else the low-level dataset's
``get(idx, offset, length)`` (file-pointer readers, mocks). ``SampleMaker`` turns the
gathered tokens into megatron-core's fields (tokens, labels, loss_mask, position_ids,
optional attention_mask) with vectorised numpy and precomputed constants.
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

import numpy

from tokenloom.errors import ConfigError, FormatError
from tokenloom.datasets.masks import (
    causal_attention_mask,
    document_boundaries,
    ltor_masks_and_position_ids,
)

__all__ = ["TokenSource", "SampleMaker"]


class TokenSource:
    """Token ranges of the documents of a low-level dataset."""

    def __init__(self, dataset) -> None:
        self.dataset = dataset
        self.lengths = numpy.asarray(dataset.sequence_lengths)
        tokens = getattr(dataset, "tokens", None)
        multimodal = getattr(dataset, "multimodal", False)
        self.tokens = None if multimodal else tokens
        if self.tokens is not None:
            self.pointers = numpy.asarray(dataset.sequence_pointers)
            self.itemsize = self.tokens.dtype.itemsize
            info = numpy.iinfo(self.tokens.dtype) if self.tokens.dtype.kind in "iu" else None
            self.value_range = None if info is None else (int(info.min), int(info.max))
        else:
            self.pointers, self.itemsize, self.value_range = None, 0, None
        self.kernel = None
        if self.tokens is not None:
            from tokenloom.datasets._batch import kernels

            module = kernels()
            self.kernel = None if module is None else module.gather_text

    def part(self, doc: int, offset: int, length: int) -> numpy.ndarray:
        """``length`` tokens of document ``doc`` from ``offset``."""
        if self.tokens is not None:
            pointer = int(self.pointers[doc])
            if pointer < 0 or pointer % self.itemsize \
                    or pointer // self.itemsize + int(self.lengths[doc]) > self.tokens.shape[0]:
                raise self.bad_document(doc)
            start = pointer // self.itemsize + offset
            return self.tokens[start : start + length]
        return self.dataset.get(doc, offset=offset, length=length)

    def bad_document(self, doc: int) -> FormatError:
        """The error for a document whose ``.idx`` pointer/length leave the ``.bin``."""
        prefix = getattr(self.dataset, "path_prefix", type(self.dataset).__name__)
        return FormatError(
            f"{prefix}.idx: sequence {doc} has pointer {int(self.pointers[doc])} and length "
            f"{int(self.lengths[doc])}, which is negative, not a multiple of the "
            f"{self.itemsize}-byte dtype or past the end of the {self.tokens.nbytes}-byte "
            f"{prefix}.bin; the .idx is corrupt or belongs to another .bin: rebuild the pair")

    def may_contain(self, value: int) -> bool:
        """Whether ``value`` could appear in the token data (False: out of dtype range)."""
        if self.value_range is None:
            return True
        return self.value_range[0] <= value <= self.value_range[1]

    def gather(self, document_index: numpy.ndarray, sample_index: numpy.ndarray, row: int,
               extra: int, pad: int, out: numpy.ndarray) -> int:
        """Copy sample ``row``'s tokens into ``out``, pad the rest; return the data count."""
        if self.kernel is not None:
            filled = int(self.kernel(self.tokens, self.pointers, self.itemsize, self.lengths,
                                     document_index, sample_index, row, extra, pad, out))
            if filled < 0:
                raise self.bad_document(-1 - filled)
            return filled
        begin, begin_offset = sample_index.item(row, 0), sample_index.item(row, 1)
        end, end_offset = sample_index.item(row + 1, 0), sample_index.item(row + 1, 1)
        if begin == end:
            filled = end_offset - begin_offset + extra
            out[:filled] = self.part(document_index.item(begin), begin_offset, filled)
        else:
            docs = document_index[begin : end + 1].tolist()
            counts = self.part_lengths(document_index, sample_index, row, extra).tolist()
            offsets = [begin_offset] + [0] * (len(docs) - 1)
            pieces = [self.part(d, o, c) for d, o, c in zip(docs, offsets, counts)]
            filled = sum(counts)
            numpy.concatenate(pieces, out=out[:filled], casting="unsafe")
        out[filled:] = pad
        return filled

    def part_lengths(self, document_index: numpy.ndarray, sample_index: numpy.ndarray,
                     row: int, extra: int) -> numpy.ndarray:
        """Tokens sample ``row`` takes from each of its documents, in order."""
        begin, begin_offset = sample_index.item(row, 0), sample_index.item(row, 1)
        end, end_offset = sample_index.item(row + 1, 0), sample_index.item(row + 1, 1)
        counts = self.lengths[document_index[begin : end + 1]].astype(numpy.int64)
        counts[0] -= begin_offset
        counts[-1] = end_offset + extra - (begin_offset if begin == end else 0)
        return counts


class SampleMaker:
    """Builds sample dicts for one GPTDataset (constants computed once)."""

    def __init__(self, config, pad: int, source: TokenSource) -> None:
        self.config = config
        self.seq = config.sequence_length
        self.extra = int(config.add_extra_token_to_sequence)
        self.pad = pad
        self.eod = config.tokenizer.eod
        self.pad_in_data = source.may_contain(pad)
        self.cacheable = not (config.reset_position_ids or config.reset_attention_mask
                              or config.eod_mask_loss)
        self.positions = numpy.arange(self.seq, dtype=numpy.int64)
        self.ones = numpy.ones(self.seq, dtype=numpy.float32)
        self.causal = None
        if config.create_attention_mask:
            try:
                self.causal = causal_attention_mask(self.seq)
            except MemoryError:
                raise ConfigError(
                    f"create_attention_mask=True with sequence_length={self.seq} needs a "
                    f"{self.seq}x{self.seq} mask, which does not fit in memory; set "
                    "create_attention_mask=False (the causal mask is implied)") from None
            self.causal.flags.writeable = False

    def split_text(self, text: numpy.ndarray) -> Tuple[numpy.ndarray, numpy.ndarray]:
        """``(tokens, labels)`` from the ``seq + extra`` gathered tokens."""
        if self.extra:
            return text[:-1], text[1:].copy()
        labels = numpy.empty(self.seq, dtype=numpy.int64)
        labels[:-1] = text[1:]
        labels[-1] = self.pad
        return text, labels

    def masks(self, tokens: numpy.ndarray):
        """``(attention_mask, loss_mask, position_ids)`` of one sample."""
        if self.cacheable:
            return self.causal, self.ones.copy(), self.positions.copy()
        per_sample_attention = self.causal is not None and bool(self.config.reset_attention_mask)
        attention, loss_mask, positions = ltor_masks_and_position_ids(
            tokens, self.eod, self.config.reset_position_ids, self.config.reset_attention_mask,
            self.config.eod_mask_loss, per_sample_attention)
        return (attention if per_sample_attention else self.causal), loss_mask, positions

    def make(self, text: numpy.ndarray, filled: int, parts: Optional[numpy.ndarray],
             is_padding_sample: bool) -> Dict[str, numpy.ndarray]:
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
        if self.config.create_attention_mask:
            sample["attention_mask"] = attention
        sample["loss_mask"] = loss_mask
        sample["position_ids"] = positions
        if self.config.return_cu_seqlens:
            if filled < text.shape[0]:
                parts = numpy.append(parts, text.shape[0] - filled)
            sample["cu_seqlens"], sample["max_seqlen"] = document_boundaries(parts, self.seq)
        return sample

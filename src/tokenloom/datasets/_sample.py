"""Turning one row of the GPT indices into a sample dict, fast.

``TokenSource`` reads token ranges of documents: straight numpy slices of the mmapped
``.bin`` (``IndexedDataset.tokens``) when available, else the low-level dataset's
``get(idx, offset, length)`` (file-pointer readers, mocks). ``SampleMaker`` turns the
gathered tokens into megatron-core's fields (tokens, labels, loss_mask, position_ids,
optional attention_mask) with vectorised numpy and precomputed constants: the general,
readable path. ``SampleMaker.bind`` picks, once per dataset, the function that serves
``dataset[idx]``: the numba kernel ``tokenloom.kernels.batch.fill_sample`` writing the
four fields straight from the mmapped ``.bin`` (``fast_fetch``) whenever it can produce
every field asked for, else the general path (``general_fetch``). Property tests prove
they agree. Before binding, the index arrays are checked against the dataset's
documents (:func:`tokenloom.index.validate.check_gpt_indices`), so no path reads
outside the ``.bin`` whatever a cache entry holds.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Optional, cast

import numpy

from tokenloom.attributes import read_attribute
from tokenloom.datasets.masks import (
    causal_attention_mask,
    document_boundaries,
    ltor_masks_and_position_ids,
)
from tokenloom.errors import ConfigError, FormatError
from tokenloom.index.validate import check_gpt_indices, sample_position
from tokenloom.kernels import KERNELS, compiled_entry, read_only

__all__ = [
    "Fetch",
    "TokenSource",
    "SampleMaker",
    "fast_fetch",
    "general_fetch",
    "sample_arguments",
    "sample_position",
]

_UNBOUND = object()

Fetch = Callable[[Optional[int]], dict[str, numpy.ndarray]]
"""``fetch(idx) -> sample dict`` of a bound :class:`SampleMaker` (``None``: padding sample)."""

GENERAL_SAMPLES_BEFORE_WAIT = 256
"""Samples ``fast_fetch`` serves by the general path while its kernel loads in the
background (:data:`tokenloom.kernels.KERNELS`); the next one waits for the load. A
reader of many samples is better off waiting than serving them all by the slower
general path, while the first samples still come at once."""


class TokenSource:
    """Token ranges of the documents of a low-level dataset."""

    def __init__(self, dataset) -> None:
        self.dataset = dataset
        self.lengths = read_only(numpy.asarray(dataset.sequence_lengths))
        tokens = read_attribute(dataset, "tokens", None)
        multimodal = read_attribute(dataset, "multimodal", False)
        self.tokens = None if multimodal or tokens is None else read_only(tokens)
        if self.tokens is not None:
            self.pointers = read_only(numpy.asarray(dataset.sequence_pointers))
            self.itemsize = self.tokens.dtype.itemsize
            info = numpy.iinfo(self.tokens.dtype) if self.tokens.dtype.kind in "iu" else None
            self.value_range = None if info is None else (int(info.min), int(info.max))
        else:
            self.pointers, self.itemsize, self.value_range = None, 0, None
        # Set by load_kernels(), usually from the kernel loader's background thread.
        self.kernel = self.sample_kernel = None

    @property
    def may_use_kernels(self) -> bool:
        """Whether the numba kernels can serve this source (once loaded)."""
        return self.tokens is not None and KERNELS.available()

    def load_kernels(
        self,
        document_index: numpy.ndarray,
        sample_index: numpy.ndarray,
        shuffle_index: numpy.ndarray,
        params: numpy.ndarray,
        seq: int,
    ) -> None:
        """Import the kernels and call each once on sample 0 of these indices, into
        buffers shaped exactly as the real calls' (this loads the machine code for these
        dtypes), then publish them to the fetchers."""
        module = KERNELS.get("batch")
        if module is None or self.tokens is None:
            return
        if sample_index.shape[0] >= 2 and shuffle_index.shape[0]:
            extra, pad = int(params[1]), int(params[2])
            module.gather_text(
                self.tokens,
                self.pointers,
                self.itemsize,
                self.lengths,
                document_index,
                sample_index,
                0,
                extra,
                pad,
                numpy.empty(seq + extra, dtype=numpy.int64),
            )
            module.fill_sample(
                *sample_arguments(self, document_index, sample_index, shuffle_index, params, seq)
            )
        self.kernel, self.sample_kernel = module.gather_text, module.fill_sample

    def part(self, doc: int, offset: int, length: int) -> numpy.ndarray:
        """``length`` tokens of document ``doc`` from ``offset``."""
        if self.tokens is not None:
            pointer = int(self.pointers[doc])
            if (
                pointer < 0
                or pointer % self.itemsize
                or pointer // self.itemsize + int(self.lengths[doc]) > self.tokens.shape[0]
            ):
                raise self.bad_document(doc)
            start = pointer // self.itemsize + offset
            return self.tokens[start : start + length]
        return self.dataset.get(doc, offset=offset, length=length)

    def bad_document(self, doc: int) -> FormatError:
        """The error for a document whose ``.idx`` pointer/length leave the ``.bin``."""
        prefix = read_attribute(self.dataset, "path_prefix", type(self.dataset).__name__)
        return FormatError(
            f"{prefix}.idx: sequence {doc} has pointer {int(self.pointers[doc])} and length "
            f"{int(self.lengths[doc])}, which is negative, not a multiple of the "
            f"{self.itemsize}-byte dtype or past the end of the "
            f"{0 if self.tokens is None else self.tokens.nbytes}-byte "
            f"{prefix}.bin; the .idx is corrupt or belongs to another .bin: rebuild the pair"
        )

    def may_contain(self, value: int) -> bool:
        """Whether ``value`` could appear in the token data (False: out of dtype range)."""
        if self.value_range is None:
            return True
        return self.value_range[0] <= value <= self.value_range[1]

    def gather(
        self,
        document_index: numpy.ndarray,
        sample_index: numpy.ndarray,
        row: int,
        extra: int,
        pad: int,
        out: numpy.ndarray,
    ) -> int:
        """Copy sample ``row``'s tokens into ``out``, pad the rest; return the data count."""
        if self.kernel is not None:
            filled = int(
                self.kernel(
                    self.tokens,
                    self.pointers,
                    self.itemsize,
                    self.lengths,
                    document_index,
                    sample_index,
                    row,
                    extra,
                    pad,
                    out,
                )
            )
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

    def part_lengths(
        self, document_index: numpy.ndarray, sample_index: numpy.ndarray, row: int, extra: int
    ) -> numpy.ndarray:
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
        self.cacheable = not (
            config.reset_position_ids or config.reset_attention_mask or config.eod_mask_loss
        )
        self.positions = numpy.arange(self.seq, dtype=numpy.int64)
        self.ones = numpy.ones(self.seq, dtype=numpy.float32)
        self.causal = None
        self.bound = _UNBOUND  # the index arrays ``fetch`` was bound to (see ``bind``)
        self.fetch: Optional[Fetch] = None
        self.checked: Optional[tuple[numpy.ndarray, ...]] = None  # see check_indices
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

    def split_text(self, text: numpy.ndarray) -> tuple[numpy.ndarray, numpy.ndarray]:
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
            tokens,
            self.eod,
            self.config.reset_position_ids,
            self.config.reset_attention_mask,
            self.config.eod_mask_loss,
            per_sample_attention,
        )
        return (attention if per_sample_attention else self.causal), loss_mask, positions

    def make(
        self,
        text: numpy.ndarray,
        filled: int,
        parts: Optional[numpy.ndarray],
        is_padding_sample: bool,
    ) -> dict[str, numpy.ndarray]:
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
                parts = numpy.append(cast(numpy.ndarray, parts), text.shape[0] - filled)
            sample["cu_seqlens"], sample["max_seqlen"] = document_boundaries(
                cast(numpy.ndarray, parts), self.seq
            )
        return sample

    def make_from_text(
        self, text: numpy.ndarray, is_padding_sample: bool
    ) -> dict[str, numpy.ndarray]:
        """The sample dict from ``seq + extra`` tokens that a subclass's
        ``_query_document_sample_shuffle_indices`` returned (megatron-core's
        ``__getitem__``: every pad id is masked and zeroed, wherever it is). With
        ``return_cu_seqlens`` the documents are the runs ending at each EOD token."""
        text = numpy.array(text, dtype=numpy.int64)  # a copy: the fields are written
        if text.shape != (self.seq + self.extra,):
            raise ConfigError(
                f"_query_document_sample_shuffle_indices returned {text.shape[0] if text.ndim else 0}"
                f" tokens; sequence_length={self.seq} with add_extra_token_to_sequence="
                f"{bool(self.extra)} needs {self.seq + self.extra}"
            )
        parts = None
        if self.config.return_cu_seqlens:
            ends = numpy.flatnonzero(text[: self.seq] == self.eod) + 1
            parts = numpy.diff(numpy.concatenate([[0], ends, [self.seq]])).astype(numpy.int64)
        return self.make(text, 0, parts, is_padding_sample)

    def fast_path_applies(self, source: TokenSource) -> bool:
        """Whether ``fill_sample`` produces every field this config asks for."""
        config = self.config
        return (
            source.may_use_kernels
            and not config.return_cu_seqlens
            and not (config.create_attention_mask and config.reset_attention_mask)
            and _fits_int64(self.eod)
            and _fits_int64(self.pad)
        )

    def bind(
        self,
        source: TokenSource,
        document_index: numpy.ndarray,
        sample_index: numpy.ndarray,
        shuffle_index: numpy.ndarray,
        count: int,
        bound: object,
    ) -> Fetch:
        """Set (and return) ``self.fetch``: ``fetch(idx) -> sample dict`` over these
        indices (checked first, see :meth:`check_indices`); ``bound`` (the owner's
        index container) marks what it was bound to."""
        self.check_indices(source, document_index, sample_index, shuffle_index, count)
        make = fast_fetch if self.fast_path_applies(source) else general_fetch
        self.fetch = make(
            self,
            source,
            read_only(document_index),
            read_only(sample_index),
            read_only(shuffle_index),
            count,
        )
        self.bound = bound
        return self.fetch

    def check_indices(
        self,
        source: TokenSource,
        document_index: numpy.ndarray,
        sample_index: numpy.ndarray,
        shuffle_index: numpy.ndarray,
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

    def general_sample(
        self,
        source: TokenSource,
        document_index: numpy.ndarray,
        sample_index: numpy.ndarray,
        row: int,
        is_padding_sample: bool,
    ) -> dict[str, numpy.ndarray]:
        """Sample ``row`` of the sample index by the general (readable) path."""
        text = numpy.empty(self.seq + self.extra, dtype=numpy.int64)
        filled = source.gather(document_index, sample_index, row, self.extra, self.pad, text)
        parts = None
        if self.config.return_cu_seqlens:
            parts = source.part_lengths(document_index, sample_index, row, self.extra)
        return self.make(text, filled, parts, is_padding_sample)


def _fits_int64(value) -> bool:
    """Whether ``value`` is an integer the kernel can take (a tokenizer may lack an EOD)."""
    try:
        return -(2**63) <= operator.index(value) < 2**63
    except TypeError:
        return False


def general_fetch(
    maker: SampleMaker,
    source: TokenSource,
    document_index: numpy.ndarray,
    sample_index: numpy.ndarray,
    shuffle_index: numpy.ndarray,
    count: int,
) -> Fetch:
    """``fetch(idx)`` by :meth:`SampleMaker.general_sample` (``None``: padding sample)."""

    def fetch(idx: Optional[int]) -> dict[str, numpy.ndarray]:
        row = shuffle_index.item(sample_position(0 if idx is None else idx, count))
        return maker.general_sample(source, document_index, sample_index, row, idx is None)

    return fetch


def kernel_params(maker: SampleMaker, source: TokenSource) -> numpy.ndarray:
    """``fill_sample``'s ``params`` array for this dataset."""
    config = maker.config
    return numpy.array(
        [
            source.itemsize,
            maker.extra,
            maker.pad,
            maker.eod,
            maker.pad_in_data,
            config.reset_position_ids,
            config.eod_mask_loss,
        ],
        dtype=numpy.int64,
    )


def sample_arguments(
    source: TokenSource,
    document_index: numpy.ndarray,
    sample_index: numpy.ndarray,
    shuffle_index: numpy.ndarray,
    params: numpy.ndarray,
    seq: int,
) -> tuple:
    """``fill_sample``'s arguments for sample 0, typed exactly as ``fast_fetch``'s calls."""
    return (
        source.tokens,
        source.pointers,
        source.lengths,
        document_index,
        sample_index,
        shuffle_index,
        0,
        params,
        numpy.empty(seq, numpy.int64),
        numpy.empty(seq, numpy.int64),
        numpy.empty(seq, numpy.float32),
        numpy.empty(seq, numpy.int64),
    )


def fast_fetch(
    maker: SampleMaker,
    source: TokenSource,
    document_index: numpy.ndarray,
    sample_index: numpy.ndarray,
    shuffle_index: numpy.ndarray,
    count: int,
    background: bool = True,
) -> Fetch:
    """``fetch(idx)`` by the ``fill_sample`` kernel: four fresh arrays per call, no
    intermediate buffer; everything per-dataset is looked up here, once.

    Until the kernels are loaded (by :data:`tokenloom.kernels.KERNELS`'s background
    thread unless ``background`` is False) samples come from the general path. The
    kernel is then called through its compiled entry point for exactly these argument
    types (:func:`tokenloom.kernels.compiled_entry`): every array passed is one of the
    arrays bound here or a fresh ``numpy.empty`` made the same way.
    """
    config, seq, empty, int64, float32 = (
        maker.config,
        maker.seq,
        numpy.empty,
        numpy.int64,
        numpy.float32,
    )
    params = kernel_params(maker, source)
    tokens, pointers, lengths = source.tokens, source.pointers, source.lengths
    attention = maker.causal if config.create_attention_mask else None
    slow = general_fetch(maker, source, document_index, sample_index, shuffle_index, count)
    arguments = (source, document_index, sample_index, shuffle_index, params, seq)
    if source.sample_kernel is None:
        _load(source, arguments, background)
    kernel, served = None, 0

    def fetch(idx: Optional[int]) -> dict[str, numpy.ndarray]:
        nonlocal kernel, served
        if kernel is None:
            loaded = source.sample_kernel
            if loaded is None:
                served += 1
                if served <= GENERAL_SAMPLES_BEFORE_WAIT or not _wait_for_load(source):
                    return slow(idx)
                loaded = source.sample_kernel
            kernel = _entry(cast(Callable, loaded), arguments)
        k = 0
        if idx is not None:  # the common case inline, the rest (and errors) validated
            k = idx if type(idx) is int and 0 <= idx < count else sample_position(idx, count)
        out_tokens, out_labels = empty(seq, int64), empty(seq, int64)
        loss_mask, position_ids = empty(seq, float32), empty(seq, int64)
        bad = kernel(
            tokens,
            pointers,
            lengths,
            document_index,
            sample_index,
            shuffle_index,
            k,
            params,
            out_tokens,
            out_labels,
            loss_mask,
            position_ids,
        )
        if bad:
            raise source.bad_document(-1 - bad)
        if idx is None:
            loss_mask.fill(0.0)
        if attention is None:
            return {
                "tokens": out_tokens,
                "labels": out_labels,
                "loss_mask": loss_mask,
                "position_ids": position_ids,
            }
        return {
            "tokens": out_tokens,
            "labels": out_labels,
            "attention_mask": attention,
            "loss_mask": loss_mask,
            "position_ids": position_ids,
        }

    return fetch


def _load(source: TokenSource, arguments: tuple, background: bool) -> None:
    """Load the kernels for ``fast_fetch`` (in the loader's background thread unless
    asked not to)."""

    def load() -> None:
        source.load_kernels(*arguments[1:])

    if background:
        KERNELS.submit(load)
    else:
        load()


def _wait_for_load(source: TokenSource) -> bool:
    """Join the pending background loads; whether ``source``'s kernel is loaded now."""
    KERNELS.join()
    return source.sample_kernel is not None


def _entry(kernel: Callable, arguments: tuple) -> Callable:
    """``kernel``'s compiled entry point for ``fast_fetch``'s argument types."""
    entry = compiled_entry(kernel, sample_arguments(*arguments))
    if entry is kernel:  # the dispatcher: ``k`` as a plain int (a bool would recompile)
        return lambda *args: kernel(*args[:6], int(args[6]), *args[7:])
    return entry

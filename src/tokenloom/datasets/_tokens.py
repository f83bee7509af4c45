"""Token ranges of the documents of a low-level dataset: what every sample is cut from.

``TokenSource`` reads straight numpy slices of the mmapped ``.bin``
(``IndexedDataset.tokens``) when available, else calls the low-level dataset's
``get(idx, offset, length)`` (file-pointer readers, mocks). Every slice of the ``.bin``
is checked against the document's ``.idx`` pointer and length first, so a corrupt pair
is a :class:`~tokenloom.errors.FormatError` naming the sequence, never a read outside
the file. Once the sample kernels are loaded (:mod:`tokenloom.datasets._fast_sample`)
the source also holds them (:meth:`TokenSource.use_kernels`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional, cast

import numpy
import numpy.typing as npt

from tokenloom.attributes import read_attribute
from tokenloom.errors import FormatError
from tokenloom.kernels import KERNELS, read_only

__all__ = ["Array", "TokenSource"]

Array = npt.NDArray[Any]
"""A numpy array of any dtype (the index arrays, token slices and sample fields)."""


class TokenSource:
    """Token ranges of the documents of a low-level dataset.

    Attributes:
        dataset: the low-level dataset (``IndexedDataset``, or any object with
            ``sequence_lengths`` and ``get(idx, offset, length)``).
        lengths: read-only sequence lengths.
        tokens: the read-only mmapped ``.bin`` as one token array now, or None (then
            every read goes through ``dataset.get``); ``current()`` gives the same.
        pointers: read-only byte offsets of the sequences in ``tokens`` (empty without).
        itemsize: bytes per token of ``tokens`` (0 without).
        kernel: ``gather_text`` once loaded, else None.
        sample_kernel: ``fill_sample`` once loaded, else None.
    """

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset
        self.lengths: Array = read_only(numpy.asarray(dataset.sequence_lengths))
        tokens = read_attribute(dataset, "tokens", None)
        multimodal = read_attribute(dataset, "multimodal", False)
        tokens = None if multimodal or tokens is None else read_only(tokens)
        self.pointers: Array = numpy.empty(0, dtype=numpy.int64)
        self.itemsize = self.nbytes = 0
        self.value_range: Optional[tuple[int, int]] = None
        self.current: Callable[[], Optional[Array]] = _none
        if tokens is not None:
            self.current = _current_view(dataset, tokens)
            self.pointers = read_only(numpy.asarray(dataset.sequence_pointers))
            self.itemsize, self.nbytes = tokens.dtype.itemsize, tokens.nbytes
            if tokens.dtype.kind in "iu":
                info = numpy.iinfo(tokens.dtype)
                self.value_range = (int(info.min), int(info.max))
        self.kernel: Optional[Callable[..., Any]] = None
        self.sample_kernel: Optional[Callable[..., Any]] = None

    @property
    def tokens(self) -> Optional[Array]:
        """The whole ``.bin`` as one read-only token array now (mapped again if the
        ``.bin`` pool evicted it), or None: read through ``dataset.get``. Not kept: a
        held view would keep its mapping alive past eviction."""
        return self.current()

    @property
    def may_use_kernels(self) -> bool:
        """Whether the numba kernels can serve this source (once loaded)."""
        return self.current is not _none and KERNELS.available()

    def use_kernels(self, gather_text: Callable[..., Any], fill_sample: Callable[..., Any]) -> None:
        """Publish the loaded kernels (``gather_text`` first: ``fill_sample`` being set
        is what tells a fetcher that both are ready)."""
        self.kernel = gather_text
        self.sample_kernel = fill_sample

    def part(self, doc: int, offset: int, length: int) -> Array:
        """``length`` tokens of document ``doc`` from ``offset``."""
        tokens = self.current()
        if tokens is not None:
            pointer = int(self.pointers[doc])
            if (
                pointer < 0
                or pointer % self.itemsize
                or pointer // self.itemsize + int(self.lengths[doc]) > tokens.shape[0]
            ):
                raise self.bad_document(doc)
            start = pointer // self.itemsize + offset
            return tokens[start : start + length]
        return cast(Array, self.dataset.get(doc, offset=offset, length=length))

    def bad_document(self, doc: int) -> FormatError:
        """The error for a document whose ``.idx`` pointer/length leave the ``.bin``."""
        prefix = read_attribute(self.dataset, "path_prefix", type(self.dataset).__name__)
        return FormatError(
            f"{prefix}.idx: sequence {doc} has pointer {int(self.pointers[doc])} and length "
            f"{int(self.lengths[doc])}, which is negative, not a multiple of the "
            f"{self.itemsize}-byte dtype or past the end of the "
            f"{self.nbytes}-byte "
            f"{prefix}.bin; the .idx is corrupt or belongs to another .bin: rebuild the pair"
        )

    def may_contain(self, value: int) -> bool:
        """Whether ``value`` could appear in the token data (False: out of dtype range)."""
        if self.value_range is None:
            return True
        return self.value_range[0] <= value <= self.value_range[1]

    def gather(
        self,
        document_index: Array,
        sample_index: Array,
        row: int,
        extra: int,
        pad: int,
        out: Array,
    ) -> int:
        """Copy sample ``row``'s tokens into ``out``, pad the rest; return the data count."""
        tokens = self.current() if self.kernel is not None else None
        if tokens is not None and self.kernel is not None:
            filled = int(
                self.kernel(
                    tokens,
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
        return int(filled)

    def part_lengths(
        self, document_index: Array, sample_index: Array, row: int, extra: int
    ) -> Array:
        """Tokens sample ``row`` takes from each of its documents, in order."""
        begin, begin_offset = sample_index.item(row, 0), sample_index.item(row, 1)
        end, end_offset = sample_index.item(row + 1, 0), sample_index.item(row + 1, 1)
        counts = self.lengths[document_index[begin : end + 1]].astype(numpy.int64)
        counts[0] -= begin_offset
        counts[-1] = end_offset + extra - (begin_offset if begin == end else 0)
        return counts


def _none() -> None:
    return None


def _current_view(dataset: Any, tokens: Array) -> Callable[[], Optional[Array]]:
    """What gives the whole ``.bin`` now: the pooled reader's ``current`` (its dtype set
    by ``dataset.tokens``), or, for a dataset without one, the array it gave."""
    reader = read_attribute(dataset, "bin_reader", None)
    current = read_attribute(reader, "current", None)
    if callable(current) and read_attribute(reader, "size", -1) // tokens.itemsize == len(tokens):
        return cast(Callable[[], Optional[Array]], current)
    return lambda: tokens

"""numba kernels of ``get_batch`` (GPT and blended datasets) and of ``dataset[i]``'s fast path
(``fill_sample``); imported only when numba is installed.

Per sample, a first pass checks every document's pointer and prefetches each cache
line of the sample's parts (software prefetches retire at once, so the lines of a
random sample come from DRAM in parallel while the kernel goes on). ``fill_sample``
then writes ``loss_mask`` and ``position_ids`` (which need no token) while those
lines arrive; then each document part is copied twice from the mmapped ``.bin``:
into the ``tokens`` row and, shifted by one, into the ``labels`` row (tight,
vectorised loops). The optional rules (EOD loss masking, position resets, pad
replacement) run only when they can apply. The rules are exactly those of
``SampleMaker.make`` (the readable specification, checked against these kernels by
property tests)."""

from __future__ import annotations

from typing import Any

import numpy
from numba import njit

from tokenloom.kernels.attribution import loss_tokens, sample_ranges_into
from tokenloom.kernels.prefetch import prefetch_read
from tokenloom.kernels.rules import apply_rules, init_masks


@njit(cache=True, nogil=True)
def _copy(tokens: numpy.ndarray, start: int, count: int, dst: numpy.ndarray, at: int) -> None:
    """``dst[at + i] = tokens[start + i]`` for the ``i`` that land inside ``dst``."""
    low = max(0, -at)
    high = min(count, dst.shape[0] - at)
    if high > low:
        src = tokens[start + low : start + high]  # a loop over two slices: measured ~1.3x
        out = dst[at + low : at + high]  # faster than numba's slice assignment
        for i in range(high - low):
            out[i] = src[i]


@njit(cache=True, nogil=True)
def _bad_document(
    tokens: numpy.ndarray, pointers: numpy.ndarray, itemsize: int, lengths: numpy.ndarray, doc: int
) -> Any:
    """Whether document ``doc``'s pointer is negative, misaligned or its tokens run past
    the end of ``tokens`` (a corrupt ``.idx``: the caller raises FormatError)."""
    pointer = numpy.int64(pointers[doc])
    return (
        pointer < 0
        or pointer % itemsize != 0
        or pointer // itemsize + numpy.int64(lengths[doc]) > tokens.shape[0]
    )


@njit(cache=True, nogil=True)
def _span(
    lengths: numpy.ndarray,
    document_index: numpy.ndarray,
    sample_index: numpy.ndarray,
    j: int,
    extra: int,
    position: int,
) -> tuple[int, int, int]:
    """``(doc, offset, count)``: sample ``j`` takes ``count`` tokens of document ``doc``
    (at ``document_index[position]``) from token ``offset``."""
    doc = document_index[position]
    offset = numpy.int64(sample_index[j, 1]) if position == sample_index[j, 0] else numpy.int64(0)
    if position == sample_index[j + 1, 0]:
        count = numpy.int64(sample_index[j + 1, 1]) + extra - offset
    else:
        count = numpy.int64(lengths[doc]) - offset
    return doc, offset, count


@njit(cache=True, nogil=True)
def _prefetch_parts(
    tokens: numpy.ndarray,
    pointers: numpy.ndarray,
    itemsize: int,
    lengths: numpy.ndarray,
    document_index: numpy.ndarray,
    sample_index: numpy.ndarray,
    j: int,
    extra: int,
) -> Any:
    """Check every document of sample ``j`` (``-1 - doc`` for the first bad one, else 0)
    and prefetch every cache line of its parts: random samples live in DRAM, and the
    prefetches let all their lines load in parallel, before the copy needs them."""
    step = max(1, 64 // itemsize)
    for position in range(sample_index[j, 0], sample_index[j + 1, 0] + 1):
        doc, offset, count = _span(lengths, document_index, sample_index, j, extra, position)
        if _bad_document(tokens, pointers, itemsize, lengths, doc):
            return -1 - numpy.int64(doc)
        start = numpy.int64(pointers[doc]) // itemsize + offset
        for i in range(start, min(start + count, tokens.shape[0]), step):
            prefetch_read(tokens, i)
    return numpy.int64(0)


@njit(cache=True, nogil=True)
def _copy_parts(
    tokens: numpy.ndarray,
    pointers: numpy.ndarray,
    itemsize: int,
    lengths: numpy.ndarray,
    document_index: numpy.ndarray,
    sample_index: numpy.ndarray,
    j: int,
    extra: int,
    pad: int,
    out_tokens: numpy.ndarray,
    out_labels: numpy.ndarray,
) -> Any:
    """Write sample ``j``'s tokens and labels (documents already checked); return how
    many tokens came from data."""
    seq = out_tokens.shape[0]
    p = numpy.int64(0)
    for position in range(sample_index[j, 0], sample_index[j + 1, 0] + 1):
        doc, offset, count = _span(lengths, document_index, sample_index, j, extra, position)
        start = numpy.int64(pointers[doc]) // itemsize + offset
        _copy(tokens, start, count, out_tokens, p)
        _copy(tokens, start, count, out_labels, p - 1)
        p += count
    for q in range(p, seq + extra):
        if q < seq:
            out_tokens[q] = pad
        if q >= 1:
            out_labels[q - 1] = pad
    if extra == 0:
        out_labels[seq - 1] = pad
    return p


@njit(cache=True, nogil=True)
def _gather(
    tokens: numpy.ndarray,
    pointers: numpy.ndarray,
    itemsize: int,
    lengths: numpy.ndarray,
    document_index: numpy.ndarray,
    sample_index: numpy.ndarray,
    j: int,
    extra: int,
    pad: int,
    out_tokens: numpy.ndarray,
    out_labels: numpy.ndarray,
) -> Any:
    """Write sample ``j``'s tokens and labels; return how many tokens came from data
    (``-1 - doc`` when document ``doc`` lies outside the ``.bin``)."""
    bad = _prefetch_parts(
        tokens, pointers, itemsize, lengths, document_index, sample_index, j, extra
    )
    if bad < 0:
        return bad
    return _copy_parts(
        tokens,
        pointers,
        itemsize,
        lengths,
        document_index,
        sample_index,
        j,
        extra,
        pad,
        out_tokens,
        out_labels,
    )


@njit(cache=True, nogil=True)
def gather_text(
    tokens: numpy.ndarray,
    pointers: numpy.ndarray,
    itemsize: int,
    lengths: numpy.ndarray,
    document_index: numpy.ndarray,
    sample_index: numpy.ndarray,
    j: int,
    extra: int,
    pad: int,
    out: numpy.ndarray,
) -> Any:
    """The ``seq + extra`` tokens of sample ``j`` into ``out`` (int64, pad after the
    data); returns how many came from data (``-1 - doc`` when document ``doc`` lies
    outside the ``.bin``)."""
    begin, begin_offset = sample_index[j, 0], sample_index[j, 1]
    end, end_offset = sample_index[j + 1, 0], sample_index[j + 1, 1]
    p = numpy.int64(0)
    for position in range(begin, end + 1):
        doc = document_index[position]
        offset = numpy.int64(begin_offset) if position == begin else numpy.int64(0)
        if position == end:
            count = numpy.int64(end_offset) + extra - offset
        else:
            count = numpy.int64(lengths[doc]) - offset
        if _bad_document(tokens, pointers, itemsize, lengths, doc):
            return -1 - numpy.int64(doc)
        start = numpy.int64(pointers[doc]) // itemsize + offset
        _copy(tokens, start, count, out, p)
        p += count
    out[p:] = pad
    return p


@njit(cache=True, nogil=True)
def _finish(
    eod: int,
    pad: int,
    check_pad: bool,
    reset_position_ids: bool,
    eod_mask_loss: bool,
    out_tokens: numpy.ndarray,
    out_labels: numpy.ndarray,
    out_loss: numpy.ndarray,
    out_positions: numpy.ndarray,
) -> None:
    """Fill ``loss_mask``/``position_ids`` and apply the optional rules to one row."""
    init_masks(out_loss, out_positions)
    apply_rules(
        eod,
        pad,
        check_pad,
        reset_position_ids,
        eod_mask_loss,
        out_tokens,
        out_labels,
        out_loss,
        out_positions,
    )


@njit(cache=True, nogil=True)
def fill_sample(
    tokens: numpy.ndarray,
    pointers: numpy.ndarray,
    lengths: numpy.ndarray,
    document_index: numpy.ndarray,
    sample_index: numpy.ndarray,
    shuffle_index: numpy.ndarray,
    k: int,
    params: numpy.ndarray,
    out_tokens: numpy.ndarray,
    out_labels: numpy.ndarray,
    out_loss: numpy.ndarray,
    out_positions: numpy.ndarray,
) -> Any:
    """One sample (``GPTDataset.__getitem__``'s fast path): sample ``k`` (row
    ``shuffle_index[k]`` of the sample index) into the four ``out_*`` arrays.
    ``params`` is int64 ``[itemsize, extra, pad, eod, pad_in_data, reset_position_ids,
    eod_mask_loss]`` (one array: fewer arguments to unbox per call). Returns 0, or
    ``-1 - doc`` for a document outside the ``.bin``."""
    j = numpy.int64(shuffle_index[k])
    itemsize, extra, pad = params[0], params[1], params[2]
    bad = _prefetch_parts(
        tokens, pointers, itemsize, lengths, document_index, sample_index, j, extra
    )
    if bad < 0:
        return bad
    init_masks(out_loss, out_positions)  # needs no token: runs while the lines arrive
    filled = _copy_parts(
        tokens,
        pointers,
        itemsize,
        lengths,
        document_index,
        sample_index,
        j,
        extra,
        pad,
        out_tokens,
        out_labels,
    )
    check_pad = params[4] != 0 or extra == 0 or filled < out_tokens.shape[0] + extra
    apply_rules(
        params[3],
        pad,
        check_pad,
        params[5] != 0,
        params[6] != 0,
        out_tokens,
        out_labels,
        out_loss,
        out_positions,
    )
    return numpy.int64(0)


@njit(cache=True, nogil=True)
def fill_batch(
    tokens: numpy.ndarray,
    pointers: numpy.ndarray,
    lengths: numpy.ndarray,
    document_index: numpy.ndarray,
    sample_index: numpy.ndarray,
    shuffle_index: numpy.ndarray,
    rows: numpy.ndarray,
    dest: numpy.ndarray,
    params: numpy.ndarray,
    out_tokens: numpy.ndarray,
    out_labels: numpy.ndarray,
    out_loss: numpy.ndarray,
    out_positions: numpy.ndarray,
    out_ranges: numpy.ndarray,
    out_counts: numpy.ndarray,
    out_source_tokens: numpy.ndarray,
    source: int,
) -> Any:
    """Fill row ``dest[i]`` of every ``out_*`` with sample ``rows[i]`` (-1: padding
    sample), in one pass: a blend writes each contributing dataset's rows straight into
    the shared output. ``params`` is ``fill_sample``'s int64 array.

    Attribution (when ``out_counts`` is not empty): row ``dest[i]`` of ``out_ranges``
    (``[B, width, 3]``) and ``out_counts`` get the sample's document ranges, and
    ``out_source_tokens[source]`` (this dataset's id) adds its loss-bearing tokens.

    Returns 0; ``-1 - doc`` as soon as document ``doc`` lies outside the ``.bin``; or
    ``1 + i`` when ``rows[i]`` is below -1 or past the shuffle index, or ``dest[i]`` is
    outside ``out_*`` (rows written before stay written)."""
    seq, count = out_tokens.shape[1], shuffle_index.shape[0]
    itemsize, extra, pad, eod = params[0], params[1], params[2], params[3]
    pad_in_data, reset_position_ids, eod_mask_loss = params[4] != 0, params[5] != 0, params[6] != 0
    for i in range(rows.shape[0]):
        k, b = rows[i], dest[i]
        if k < -1 or k >= count or b < 0 or b >= out_tokens.shape[0]:
            return numpy.int64(1 + i)
        padding_sample = k < 0
        if padding_sample:
            k = 0
        j = numpy.int64(shuffle_index[k])
        filled = _gather(
            tokens,
            pointers,
            itemsize,
            lengths,
            document_index,
            sample_index,
            j,
            extra,
            pad,
            out_tokens[b],
            out_labels[b],
        )
        if filled < 0:
            return filled
        check_pad = pad_in_data or extra == 0 or filled < seq + extra
        _finish(
            eod,
            pad,
            check_pad,
            reset_position_ids,
            eod_mask_loss,
            out_tokens[b],
            out_labels[b],
            out_loss[b],
            out_positions[b],
        )
        if padding_sample:
            out_loss[b, :] = 0.0
        if out_counts.shape[0]:
            out_counts[b] = sample_ranges_into(
                document_index,
                sample_index,
                lengths,
                -1 if padding_sample else j,
                extra,
                out_ranges[b],
            )
            if not padding_sample:
                out_source_tokens[source] += loss_tokens(out_loss[b], check_pad or eod_mask_loss)
    return numpy.int64(0)

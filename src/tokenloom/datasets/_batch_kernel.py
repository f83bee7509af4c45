"""numba kernel of ``GPTDataset.get_batch`` (imported only when numba is installed).

Per sample, each document part is copied twice from the mmapped ``.bin``: into the
``tokens`` row and, shifted by one, into the ``labels`` row (tight, vectorisable
loops); then ``loss_mask`` and ``position_ids`` are filled and the optional rules
(EOD loss masking, position resets, pad replacement) run only when they can apply.
The rules are exactly those of ``SampleMaker.make`` (the readable specification,
checked against this kernel by property tests).
"""

from __future__ import annotations

import numpy
from numba import njit


@njit(cache=True, nogil=True)
def _copy(tokens, start, count, dst, at):
    """``dst[at + i] = tokens[start + i]`` for the ``i`` that land inside ``dst``."""
    low = max(0, -at)
    high = min(count, dst.shape[0] - at)
    if high > low:
        dst[at + low : at + high] = tokens[start + low : start + high]


@njit(cache=True, nogil=True)
def _bad_document(tokens, pointers, itemsize, lengths, doc):
    """Whether document ``doc``'s pointer is negative, misaligned or its tokens run past
    the end of ``tokens`` (a corrupt ``.idx``: the caller raises FormatError)."""
    pointer = numpy.int64(pointers[doc])
    return (pointer < 0 or pointer % itemsize != 0
            or pointer // itemsize + numpy.int64(lengths[doc]) > tokens.shape[0])


@njit(cache=True, nogil=True)
def _gather(tokens, pointers, itemsize, lengths, document_index, sample_index, j, extra,
            pad, out_tokens, out_labels):
    """Write sample ``j``'s tokens and labels; return how many tokens came from data
    (``-1 - doc`` when document ``doc`` lies outside the ``.bin``)."""
    seq = out_tokens.shape[0]
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
def gather_text(tokens, pointers, itemsize, lengths, document_index, sample_index, j, extra,
                pad, out):
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
def _finish(eod, pad, check_pad, reset_position_ids, eod_mask_loss, out_tokens, out_labels,
            out_loss, out_positions):
    """Fill ``loss_mask``/``position_ids`` and apply the optional rules to one row."""
    seq = out_tokens.shape[0]
    for p in range(seq):
        out_loss[p] = 1.0
        out_positions[p] = p
    if eod_mask_loss:
        for p in range(seq):
            if out_tokens[p] == eod:
                out_loss[p] = 0.0
    if reset_position_ids:
        base = 0
        for p in range(seq):
            out_positions[p] = p - base
            if out_tokens[p] == eod:
                base = p + 1
    if check_pad:
        for p in range(seq):
            if out_labels[p] == pad:
                out_loss[p] = 0.0
                out_labels[p] = 0
            if out_tokens[p] == pad:
                out_tokens[p] = 0


@njit(cache=True, nogil=True)
def fill_batch(tokens, pointers, itemsize, lengths, document_index, sample_index,
               shuffle_index, rows, extra, pad, eod, pad_in_data, reset_position_ids,
               eod_mask_loss, out_tokens, out_labels, out_loss, out_positions):
    """Fill row ``b`` of every ``out_*`` with sample ``rows[b]`` (-1: padding sample).

    Returns 0, or ``-1 - doc`` as soon as document ``doc`` lies outside the ``.bin``."""
    seq = out_tokens.shape[1]
    for b in range(rows.shape[0]):
        k = rows[b]
        padding_sample = k < 0
        if padding_sample:
            k = 0
        j = numpy.int64(shuffle_index[k])
        filled = _gather(tokens, pointers, itemsize, lengths, document_index, sample_index,
                         j, extra, pad, out_tokens[b], out_labels[b])
        if filled < 0:
            return filled
        check_pad = pad_in_data or extra == 0 or filled < seq + extra
        _finish(eod, pad, check_pad, reset_position_ids, eod_mask_loss, out_tokens[b],
                out_labels[b], out_loss[b], out_positions[b])
        if padding_sample:
            out_loss[b, :] = 0.0
    return numpy.int64(0)

"""Left-to-right masks and position ids of a GPT sample.

:func:`ltor_masks_and_position_ids` is the fast, vectorised form used by
``GPTDataset``; :func:`reference_ltor_masks_and_position_ids` follows megatron-core's
loop literally and is kept as the readable specification (tests prove they agree).

Conventions (megatron-core's): ``attention_mask`` is ``[1, seq, seq]`` bool where
True means *masked*; ``loss_mask`` is float32; ``position_ids`` is int64.
"""

from __future__ import annotations

from typing import Optional

import numpy

__all__ = [
    "ltor_masks_and_position_ids",
    "reference_ltor_masks_and_position_ids",
    "causal_attention_mask",
    "document_boundaries",
    "inter_document_fields",
]


def causal_attention_mask(seq_length: int) -> numpy.ndarray:
    """``[1, seq, seq]`` bool, True above the diagonal (the future is masked)."""
    return numpy.triu(numpy.ones((seq_length, seq_length), dtype=bool), k=1)[None]


def reference_ltor_masks_and_position_ids(
    tokens: numpy.ndarray,
    eod: int,
    reset_position_ids: bool,
    reset_attention_mask: bool,
    eod_mask_loss: bool,
    create_attention_mask: bool,
) -> tuple[Optional[numpy.ndarray], numpy.ndarray, numpy.ndarray]:
    """megatron-core's ``_get_ltor_masks_and_position_ids``, step by step."""
    seq_length = tokens.shape[0]
    attention: Optional[numpy.ndarray] = None
    if create_attention_mask:
        attention = numpy.tril(numpy.ones((seq_length, seq_length), dtype=numpy.float32))[None]
    loss_mask = numpy.ones(seq_length, dtype=numpy.float32)
    if eod_mask_loss:
        loss_mask[tokens == eod] = 0.0
    position_ids = numpy.arange(seq_length, dtype=numpy.int64)
    if reset_position_ids or reset_attention_mask:
        previous = 0
        for i in numpy.flatnonzero(tokens == eod):
            if reset_attention_mask and attention is not None:
                attention[0, i + 1 :, : i + 1] = 0
            if reset_position_ids:
                position_ids[i + 1 :] -= i + 1 - previous
                previous = i + 1
    if attention is not None:
        attention = attention < 0.5
    return attention, loss_mask, position_ids


def _segments(is_eod: numpy.ndarray) -> numpy.ndarray:
    """Segment id of each position: the number of EOD tokens strictly before it."""
    segments = numpy.empty(is_eod.shape[0], dtype=numpy.int64)
    segments[0] = 0
    numpy.cumsum(is_eod[:-1], out=segments[1:])
    return segments


def reset_positions(is_eod: numpy.ndarray) -> numpy.ndarray:
    """Position ids restarting at 0 after every EOD token."""
    seq_length = is_eod.shape[0]
    positions = numpy.arange(seq_length, dtype=numpy.int64)
    starts = numpy.zeros(seq_length, dtype=numpy.int64)
    after_eod = numpy.flatnonzero(is_eod[:-1]) + 1
    starts[after_eod] = after_eod
    numpy.maximum.accumulate(starts, out=starts)
    return positions - starts


def ltor_masks_and_position_ids(
    tokens: numpy.ndarray,
    eod: int,
    reset_position_ids: bool,
    reset_attention_mask: bool,
    eod_mask_loss: bool,
    create_attention_mask: bool,
) -> tuple[Optional[numpy.ndarray], numpy.ndarray, numpy.ndarray]:
    """Vectorised ``(attention_mask, loss_mask, position_ids)``; same values as the reference."""
    seq_length = tokens.shape[0]
    is_eod = tokens == eod
    loss_mask = numpy.ones(seq_length, dtype=numpy.float32)
    if eod_mask_loss:
        loss_mask[is_eod] = 0.0
    if reset_position_ids:
        position_ids = reset_positions(is_eod)
    else:
        position_ids = numpy.arange(seq_length, dtype=numpy.int64)
    attention = None
    if create_attention_mask:
        attention = causal_attention_mask(seq_length)
        if reset_attention_mask and is_eod[:-1].any():
            segments = _segments(is_eod)
            attention |= (segments[:, None] != segments[None, :])[None]
    return attention, loss_mask, position_ids


def document_boundaries(
    part_lengths: numpy.ndarray, seq_length: int
) -> tuple[numpy.ndarray, numpy.ndarray]:
    """``(cu_seqlens, max_seqlen)`` of a sample cut from documents of ``part_lengths``.

    ``part_lengths`` are the token counts taken from each document (in order, padding
    counted as a final part). Boundaries at or past ``seq_length`` are dropped, and
    ``seq_length`` closes the list: ``cu_seqlens`` is int32 ``[0, ..., seq_length]``.
    """
    ends = numpy.cumsum(part_lengths, dtype=numpy.int64)
    inner = ends[ends < seq_length]
    inner = inner[inner > 0]
    cu_seqlens = numpy.empty(inner.shape[0] + 2, dtype=numpy.int32)
    cu_seqlens[0] = 0
    cu_seqlens[1:-1] = inner
    cu_seqlens[-1] = seq_length
    max_seqlen = numpy.array(numpy.diff(cu_seqlens).max(), dtype=numpy.int32)
    return cu_seqlens, max_seqlen


def inter_document_fields(
    part_lengths: numpy.ndarray, seq_length: int, extra: int
) -> tuple[numpy.ndarray, numpy.ndarray, numpy.ndarray]:
    """``(cu_seqlens, max_seqlen, position_ids)`` of Megatron-LM main's
    ``inter_document_masking`` for a sample of documents of ``part_lengths`` (the tokens
    read from each, the ``extra`` label token included in the last, padding not).

    The extra token leaves the last part (which goes when that empties it); a sample
    shorter than ``seq_length`` (padded) gives the shortfall to its last part (or to a
    part of its own when none is left). ``cu_seqlens`` is int32 ``[0, ..., seq_length]``
    padded with ``seq_length`` to ``seq_length + 1`` entries, so that samples stack;
    ``max_seqlen`` its longest part (int32 scalar); ``position_ids`` restart at 0 at each
    part (int64).
    """
    lengths = [int(n) for n in part_lengths]
    if extra and lengths:
        lengths[-1] -= extra
        if lengths[-1] == 0:
            lengths.pop()
    shortfall = seq_length - sum(lengths)
    if shortfall > 0:
        if lengths:
            lengths[-1] += shortfall
        else:
            lengths.append(shortfall)
    ends = numpy.cumsum([0, *lengths], dtype=numpy.int64)
    cu_seqlens = numpy.full(seq_length + 1, seq_length, dtype=numpy.int32)
    shown = min(ends.shape[0], seq_length + 1)  # empty parts past the end are not shown
    cu_seqlens[:shown] = ends[:shown]
    max_seqlen = numpy.array(numpy.diff(ends).max(), dtype=numpy.int32)
    starts = numpy.repeat(ends[:-1], lengths)
    position_ids = numpy.arange(seq_length, dtype=numpy.int64) - starts[:seq_length]
    return cu_seqlens, max_seqlen, position_ids

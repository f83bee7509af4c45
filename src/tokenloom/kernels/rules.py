"""numba helpers of :mod:`tokenloom.kernels.batch`: the mask fields and the optional
rules of one sample row (EOD loss masking, position resets, pad replacement), exactly
those of ``SampleMaker.make`` (the readable specification); imported only by
:mod:`tokenloom.kernels.batch`."""

from __future__ import annotations

import numpy
from numba import njit


@njit(cache=True, nogil=True)
def init_masks(out_loss: numpy.ndarray, out_positions: numpy.ndarray) -> None:
    """``loss_mask`` all ones, ``position_ids`` ``0 .. seq-1`` (before any rule)."""
    for p in range(out_loss.shape[0]):
        out_loss[p] = 1.0
    for p in range(out_positions.shape[0]):
        out_positions[p] = p


@njit(cache=True, nogil=True)
def apply_rules(
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
    """Apply the optional rules to one row whose masks were initialised."""
    seq = out_tokens.shape[0]
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

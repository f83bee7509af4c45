"""THD helpers: the context-parallel partition of packed sequences and the padding mask.

:func:`thd_partitioned_indices` is tokenloom's own implementation of what Transformer
Engine's ``thd_get_partitioned_indices`` computes (no TE needed): every sequence of
padded length ``L`` is cut into ``2 * cp_size`` equal chunks, and CP rank ``r`` takes
chunk ``r`` and chunk ``2 * cp_size - 1 - r`` (load balance for causal attention).
The result holds global token positions, int32, in sequence order.
"""

from __future__ import annotations

from typing import Any

import torch

from tokenloom.errors import PackingError

PAD_VALUES = {"tokens": 0, "labels": 0, "loss_mask": 0.0, "position_ids": 0}


def _check_partition_args(
    cu_seqlens: torch.Tensor, total_tokens: int, cp_size: int, cp_rank: int
) -> None:
    if cu_seqlens.dtype != torch.int32:
        raise PackingError(f"cu_seqlens_padded must be int32, got {cu_seqlens.dtype}")
    if cu_seqlens.dim() != 1 or cu_seqlens.numel() < 2:
        raise PackingError(
            "cu_seqlens_padded must be 1-D with at least 2 entries, got shape "
            f"{tuple(cu_seqlens.shape)}"
        )
    if cp_size < 1 or not 0 <= cp_rank < cp_size:
        raise PackingError(f"cp_rank {cp_rank} is out of range for cp_size {cp_size}")
    if total_tokens <= 0 or total_tokens % (2 * cp_size):
        raise PackingError(
            f"total_tokens {total_tokens} must be > 0 and a multiple of 2 * cp_size = {2 * cp_size}"
        )


def thd_partitioned_indices(
    cu_seqlens_padded: torch.Tensor, total_tokens: int, cp_size: int, cp_rank: int
) -> torch.Tensor:
    """Token positions CP rank ``cp_rank`` holds of a THD batch (int32, ``total/cp`` long)."""
    _check_partition_args(cu_seqlens_padded, total_tokens, cp_size, cp_rank)
    bounds = cu_seqlens_padded.to(device="cpu", dtype=torch.int64)
    lengths = bounds[1:] - bounds[:-1]
    chunks = 2 * cp_size
    bad = torch.nonzero((lengths < 0) | (lengths % chunks != 0)).reshape(-1)
    if bad.numel():
        first = int(bad[0])
        raise PackingError(
            f"sequence {first} has padded length {int(lengths[first])}, not a multiple of "
            f"2 * cp_size = {chunks}; pad every sequence to a multiple of {chunks} tokens"
        )
    if int(bounds[-1]) != total_tokens:
        raise PackingError(
            f"total_tokens {total_tokens} differs from cu_seqlens_padded[-1] {int(bounds[-1])}"
        )
    chunk = lengths // chunks
    starts = bounds[:-1]
    first_start = starts + cp_rank * chunk
    second_start = starts + (chunks - 1 - cp_rank) * chunk
    spans = torch.stack([first_start, second_start], dim=1).reshape(-1)
    sizes = chunk.repeat_interleave(2)
    offsets = torch.arange(int(sizes.sum())) - torch.repeat_interleave(
        torch.cumsum(sizes, 0) - sizes, sizes
    )
    index = torch.repeat_interleave(spans, sizes) + offsets
    return index.to(device=cu_seqlens_padded.device, dtype=torch.int32)


def thd_padding_mask(cu_seqlens: torch.Tensor, cu_seqlens_padded: torch.Tensor) -> torch.Tensor:
    """Bool mask over the packed buffer, True on the padded slots of every sequence."""
    if (
        cu_seqlens.dim() != 1
        or cu_seqlens_padded.dim() != 1
        or cu_seqlens.numel() != cu_seqlens_padded.numel()
    ):
        raise PackingError(
            f"cu_seqlens {tuple(cu_seqlens.shape)} and cu_seqlens_padded "
            f"{tuple(cu_seqlens_padded.shape)} must be 1-D with the same number of entries"
        )
    total = int(cu_seqlens_padded[-1]) if cu_seqlens_padded.numel() else 0
    if total == 0:
        return torch.zeros(0, dtype=torch.bool, device=cu_seqlens.device)
    if cu_seqlens.numel() < 2:
        return torch.ones(total, dtype=torch.bool, device=cu_seqlens.device)
    positions = torch.arange(total, dtype=cu_seqlens_padded.dtype, device=cu_seqlens_padded.device)
    sequence = torch.searchsorted(cu_seqlens_padded[1:].contiguous(), positions, right=True)
    valid = (cu_seqlens[1:] - cu_seqlens[:-1]).clamp(min=0)
    valid_end = cu_seqlens_padded[:-1] + valid
    return positions >= valid_end[sequence]


def zero_padded_slots(batch: dict[str, Any], padding_mask: torch.Tensor) -> None:
    """Set the padded slots of tokens/labels/loss_mask/position_ids to 0 (in place in ``batch``)."""
    for key, value in PAD_VALUES.items():
        tensor = batch.get(key)
        if tensor is None:
            continue
        if tensor.dim() != 1 or tensor.numel() != padding_mask.numel():
            raise PackingError(
                f"batch[{key!r}] has shape {tuple(tensor.shape)}, but the packed buffer has "
                f"{padding_mask.numel()} tokens (cu_seqlens_padded[-1]); they must agree"
            )
        batch[key] = tensor.masked_fill(padding_mask, value)

"""``PackedSeqParams``: the THD metadata that attention kernels read, with Megatron's fields."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch


@dataclass
class PackedSeqParams:
    """Parameters for the ``thd`` (packed) sequence format, field for field Megatron's.

    When ``total_tokens`` is given and ``seq_idx`` is not, ``seq_idx`` is computed as in
    Megatron-LM: the sequence number of every token (shape ``[1, total_tokens]``,
    int32), with the tokens past the last boundary counted as one more sequence.
    """

    qkv_format: Optional[str] = None
    """``"thd"`` for packed sequences (``"sbhd"``/``"bshd"`` otherwise)."""
    cu_seqlens_q: Optional[torch.Tensor] = None
    """Cumulative query sequence lengths, int32, ``[num_seqs + 1]``."""
    cu_seqlens_kv: Optional[torch.Tensor] = None
    """Cumulative key/value sequence lengths, int32."""
    cu_seqlens_q_padded: Optional[torch.Tensor] = None
    """Cumulative query lengths including the per-sequence padding, int32."""
    cu_seqlens_kv_padded: Optional[torch.Tensor] = None
    """Cumulative key/value lengths including the per-sequence padding, int32."""
    max_seqlen_q: Optional[int] = None
    """Longest (padded) query sequence."""
    max_seqlen_kv: Optional[int] = None
    """Longest (padded) key/value sequence."""
    local_cp_size: Optional[int] = None
    """Number of CP ranks that share this sub-sample (hybrid CP), else None."""
    cp_group: Any = None
    """The CP process group of this sub-sample (hybrid CP), else None."""
    total_tokens: Optional[int] = None
    """Tokens in the packed buffer; when set, ``seq_idx`` is derived from it."""
    seq_idx: Optional[torch.Tensor] = None
    """Per-token sequence index, ``[1, total_tokens]`` int32 (Mamba's packed kernels)."""

    def __post_init__(self) -> None:
        boundaries = (
            self.cu_seqlens_q_padded if self.cu_seqlens_q_padded is not None else self.cu_seqlens_q
        )
        if (
            self.seq_idx is None
            and isinstance(boundaries, torch.Tensor)
            and self.total_tokens is not None
        ):
            self.seq_idx = sequence_index(boundaries, int(self.total_tokens))


def sequence_index(cu_seqlens: torch.Tensor, total_tokens: int) -> torch.Tensor:
    """Sequence number of each of ``total_tokens`` tokens given the boundaries ``cu_seqlens``."""
    ends = torch.cat(
        [
            cu_seqlens.reshape(-1).to(torch.int64),
            torch.tensor([total_tokens], dtype=torch.int64, device=cu_seqlens.device),
        ]
    )
    lengths = (ends[1:] - ends[:-1]).clamp(min=0)
    numbers = torch.arange(lengths.numel(), device=cu_seqlens.device)
    return torch.repeat_interleave(numbers, lengths).to(torch.int32).unsqueeze(0)

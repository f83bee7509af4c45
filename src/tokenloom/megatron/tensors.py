"""Samples as megatron-core returns them: torch tensors, same keys and dtypes.

tokenloom's datasets give numpy arrays; under the compat layer each field becomes the
tensor megatron-core's ``GPTDataset.__getitem__`` returns (tokens, labels and
position_ids int64, loss_mask float32, attention_mask bool ``[1, seq, seq]``), sharing
memory with the fresh arrays tokenloom made for that sample (a read-only array, such
as the shared causal mask, is copied first: a tensor may be written).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy

__all__ = ["to_torch"]


def to_torch(sample: Mapping[str, Any]) -> dict[str, Any]:
    """``sample`` with every numpy array as a torch tensor (other values kept)."""
    import torch

    out: dict[str, Any] = {}
    for key, value in sample.items():
        if isinstance(value, numpy.ndarray):
            if not value.flags.writeable:
                value = value.copy()
            out[key] = torch.from_numpy(value)
        else:
            out[key] = value
    return out

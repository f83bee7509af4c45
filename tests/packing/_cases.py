"""Shared inputs of the packing tests: golden paths, tensor conversion, random batches."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / ".." / "shared" / "golden" / "megatron-training"
WRAP_LAYOUTS = (
    "dp2_cp2",
    "dp2_cp2_unpacked",
    "dp2_cp2_tp2",
    "dp2_cp1_pp3",
    "dp2_cp1_pp3_vpp2",
    "dp1_cp2_pp3_vpp2",
    "dp1_cp1_pp3_fp32",
    "dp2_cp1_error",
)
HYBRID_LAYOUTS = ("dp2_cp2", "dp1_cp4", "dp4_cp1")
DTYPES = {"loss_mask": torch.float32, "cu_seqlens": torch.int32, "max_seqlen": torch.int32}

# (name, tp, cp, dp, pp, vpp, mbgs, max_seqlen_per_dp_cp_rank) of the random multi-process runs
RANDOM_LAYOUTS = (
    ("dp2_cp2", 1, 2, 2, 1, None, 1, 48),
    ("dp4_cp1", 1, 1, 4, 1, None, 1, 64),
    ("dp2_tp2", 2, 1, 2, 1, None, 1, 64),
    ("dp2_pp3_vpp2", 1, 1, 2, 3, 2, 3, 64),
)
RANDOM_SCHEDULERS = ("dp_balanced", "cost_balanced")
RANDOM_MICROBATCHES = 6


def golden_missing_reason() -> str:
    """Why the golden folder cannot be used, or '' when it can."""
    if not (GOLDEN / "README.md").is_file():
        return f"golden vectors not found at {GOLDEN} (../shared/golden/megatron-training/)"
    return ""


def load(name: str) -> Any:
    """One golden JSON file."""
    return json.loads((GOLDEN / name).read_text())


def to_tensors(sample: dict) -> dict:
    """A golden sample dict (lists) as tensors with the README's dtypes."""
    return {k: torch.tensor(v, dtype=DTYPES.get(k, torch.int64)) for k, v in sample.items()}


def to_lists(value: Any) -> Any:
    """Tensors (also nested in dicts/lists) as JSON-ready lists, ints or floats."""
    if isinstance(value, torch.Tensor):
        return value.tolist()
    if isinstance(value, dict):
        return {str(k): to_lists(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_lists(v) for v in value]
    return value


def dtype_name(tensor: torch.Tensor) -> str:
    """``int64`` etc."""
    return str(tensor.dtype).replace("torch.", "")


def random_sequences(layout: str, scheduler: str, dp_rank: int, cp: int) -> list[list[dict]]:
    """This DP rank's items: lists of 1-3 unpacked samples with junk in the padded slots.

    Token ``t`` of sequence ``k`` of DP rank ``d`` is ``1_000_000 * (d + 1) + 1000 * k + t``.
    """
    rng = random.Random(f"{layout}/{scheduler}/{dp_rank}")
    items, k = [], 0
    for _ in range(RANDOM_MICROBATCHES):
        item = []
        for _ in range(rng.randint(1, 3)):
            original = rng.randint(1, 40)
            padded = -(-original // (2 * cp)) * (2 * cp)
            base = 1_000_000 * (dp_rank + 1) + 1000 * k
            tokens = [base + t for t in range(original)] + [-1] * (padded - original)
            item.append(
                {
                    "tokens": torch.tensor(tokens),
                    "labels": torch.tensor(tokens) + 1,
                    "loss_mask": torch.ones(padded),
                    "position_ids": torch.arange(padded),
                    "original_seq_len": torch.tensor([original]),
                    "padded_seq_len": torch.tensor([padded]),
                }
            )
            k += 1
        items.append(item)
    return items

"""``get_batch_on_this_rank_for_sequence_packing``: one THD microbatch, CP-sliced, on every rank.

TP rank 0 reads the packed microbatch, builds the padding mask (True on padded
slots) and zeroes the padded slots of the token tensors, then keeps its CP share of
every sequence (chunks ``r`` and ``2*cp-1-r``, :func:`thd_partitioned_indices`; no
Transformer Engine needed).  Everything is then broadcast over TP.  tokens and
position_ids go to the first stage, labels and loss_mask to the last stage, the
padding mask to every stage, as Megatron-LM does.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterator
from typing import Any, Optional, cast

import torch

from tokenloom.errors import ConfigError, PackingError
from tokenloom.packing._comm import broadcast, broadcast_scalars, resolve_device
from tokenloom.packing.groups import group_rank, group_size, require_groups
from tokenloom.packing.params import PackedSeqParams
from tokenloom.packing.thd import thd_padding_mask, thd_partitioned_indices, zero_padded_slots

BatchTuple = tuple[
    Optional[torch.Tensor],
    Optional[torch.Tensor],
    Optional[torch.Tensor],
    None,
    Optional[torch.Tensor],
    PackedSeqParams,
    torch.Tensor,
]
STEP = "get_batch_on_this_rank_for_sequence_packing"
"""How errors name this function's broadcasts."""
EXPECTED = {
    "tokens": torch.int64,
    "position_ids": torch.int64,
    "labels": torch.int64,
    "loss_mask": torch.float32,
    "cu_seqlens": torch.int32,
    "cu_seqlens_padded": torch.int32,
}


def _read(data_iterator: Optional[Iterator[Any]], keys: tuple[str, ...]) -> dict[str, Any]:
    if data_iterator is None:
        raise ConfigError("TP rank 0 needs the data iterator that wrap_data_iterator returned")
    batch = dict(next(data_iterator))
    missing = [k for k in keys if k not in batch]
    if missing:
        raise PackingError(f"the microbatch lacks the key(s) {missing}; it has {sorted(batch)}")
    for key, dtype in EXPECTED.items():
        if key in keys and batch[key].dtype != dtype:
            raise PackingError(f"batch[{key!r}] is {batch[key].dtype}, expected {dtype}")
    return batch


def _slice_for_cp(batch: dict[str, Any], cp_group: Any, token_keys: bool) -> None:
    cp_size = group_size(cp_group)
    if cp_size == 1:
        return
    bounds = batch["cu_seqlens_padded"]
    index = thd_partitioned_indices(bounds, int(bounds[-1]), cp_size, group_rank(cp_group))
    index = index.to(device=batch["padding_mask"].device, dtype=torch.int64)
    keys = ["padding_mask"] + (
        ["tokens", "position_ids", "labels", "loss_mask"] if token_keys else []
    )
    for key in keys:
        if batch.get(key) is not None:
            batch[key] = batch[key].index_select(0, index)


def _shaped(
    batch: dict[str, Any], key: str, wanted: bool, first_tp: bool, total: int, device: torch.device
) -> Optional[torch.Tensor]:
    if not wanted:
        return None
    if first_tp:
        return batch[key].view(1, total)
    dtype = torch.bool if key == "padding_mask" else EXPECTED[key]
    return torch.empty([1, total], dtype=dtype, device=device)


def _max_seqlen(value: Any, device: torch.device) -> torch.Tensor:
    if isinstance(value, int):
        return torch.tensor(value, dtype=torch.int32, device=device)
    if value.dtype != torch.int32 or value.numel() != 1:
        raise PackingError(
            f"max_seqlen must be an int or a one-element int32 tensor, got "
            f"{value.dtype} with {value.numel()} elements"
        )
    return value


def _check_stage(vpp_size: Any, vp_stage: Any) -> None:
    """ConfigError unless ``vpp_size`` is None or an int >= 1 and ``vp_stage`` fits it."""
    for name, value, low in (("vpp_size", vpp_size, 1), ("vp_stage", vp_stage, 0)):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low
        ):
            raise ConfigError(f"{name} must be None or an int >= {low}, got {value!r}")
    if vp_stage is not None and vp_stage >= (vpp_size or 1):
        raise ConfigError(
            f"vp_stage {vp_stage} is not a stage of vpp_size {vpp_size}: use 0 to "
            f"{(vpp_size or 1) - 1}"
        )


def _stages(pp_group: Any, vpp_size: Optional[int], vp_stage: Optional[int]) -> tuple[bool, bool]:
    """``(first, last)``: whether this rank runs the first and the last pipeline stage."""
    stage, stages = group_rank(pp_group), group_size(pp_group)
    first = stage == 0 and vp_stage in (None, 0)
    last = stage == stages - 1 and (vp_stage is None or vp_stage == (vpp_size or 1) - 1)
    return first, last


def _read_on_tp_rank_0(
    data_iterator: Optional[Iterator[Any]],
    keys: tuple[str, ...],
    cp_group: Any,
    first_tp: bool,
    token_keys: bool,
) -> dict[str, Any]:
    """The microbatch with its padding mask, padded slots zeroed and CP-sliced, on TP
    rank 0; ``{}`` on the other TP ranks (which must not be given a data iterator)."""
    if not first_tp:
        if data_iterator is not None:
            raise ConfigError(
                "only TP rank 0 reads data; pass data_iterator=None on other TP ranks"
            )
        return {}
    batch = _read(data_iterator, keys)
    batch["padding_mask"] = thd_padding_mask(batch["cu_seqlens"], batch["cu_seqlens_padded"])
    zero_padded_slots(batch, batch["padding_mask"])
    _slice_for_cp(batch, cp_group, token_keys)
    return batch


def _broadcast_over_tp(
    batch: dict[str, Any], wanted: dict[str, bool], tp_group: Any, dev: torch.device, first_tp: bool
) -> dict[str, Optional[torch.Tensor]]:
    """Every tensor of the microbatch on every TP rank, broadcast from TP rank 0: the
    ``wanted`` token tensors and the padding mask, then cu_seqlens(_padded) and max_seqlen."""
    shapes = [batch["cu_seqlens"].numel(), batch["padding_mask"].numel()] if first_tp else [0, 0]
    n_bounds, total = (
        int(v)
        for v in broadcast_scalars(
            shapes, tp_group, dev, f"{STEP}: broadcast of the shapes over the TP group", torch.int32
        )
    )
    out: dict[str, Optional[torch.Tensor]] = {
        key: _shaped(batch, key, want, first_tp, total, dev) for key, want in wanted.items()
    }
    if first_tp:
        out["cu_seqlens"], out["cu_seqlens_padded"] = (
            batch["cu_seqlens"],
            batch["cu_seqlens_padded"],
        )
        out["max_seqlen"] = _max_seqlen(batch["max_seqlen"], batch["cu_seqlens"].device)
    else:
        out["cu_seqlens"] = torch.empty(n_bounds, dtype=torch.int32, device=dev)
        out["cu_seqlens_padded"] = torch.empty(n_bounds, dtype=torch.int32, device=dev)
        out["max_seqlen"] = torch.empty(1, dtype=torch.int32, device=dev)
    for name, tensor in out.items():  # right after the shapes: every TP rank is there
        step = f"{STEP}: broadcast of {name!r} over the TP group"
        broadcast(tensor, tp_group, step, roll_call=False)  # skipped for None
    return out


def _thd_params(padded: torch.Tensor, max_seqlen: torch.Tensor) -> PackedSeqParams:
    longest = int(max_seqlen.item())
    return PackedSeqParams(
        qkv_format="thd",
        cu_seqlens_q=padded,
        cu_seqlens_kv=padded,
        cu_seqlens_q_padded=padded,
        cu_seqlens_kv_padded=padded,
        max_seqlen_q=longest,
        max_seqlen_kv=longest,
    )


def get_batch_on_this_rank_for_sequence_packing(
    data_iterator: Optional[Iterator[Any]],
    vpp_size: Optional[int] = None,
    mtp_on_this_rank: bool = False,
    vp_stage: Optional[int] = None,
    pg_collection: Any = None,
    *,
    device: Any = None,
) -> BatchTuple:
    """Return ``(tokens, labels, loss_mask, None, position_ids, packed_seq_params,
    padding_mask)`` for this rank, Megatron's 7-tuple (each tensor ``[1, T / cp]``)."""
    _check_stage(vpp_size, vp_stage)
    groups = require_groups(pg_collection, ("tp", "pp", "cp"))
    tp_group, cp_group = groups["tp"], groups["cp"]
    dev = resolve_device(device, tp_group)
    first_tp = group_rank(tp_group) == 0
    first, last = _stages(groups["pp"], vpp_size, vp_stage)
    inputs, targets = first or mtp_on_this_rank, last
    keys = (
        ("cu_seqlens", "cu_seqlens_padded", "max_seqlen")
        + (("tokens", "position_ids") if inputs else ())
        + (("labels", "loss_mask") if targets else ())
    )
    batch = _read_on_tp_rank_0(data_iterator, keys, cp_group, first_tp, first or last)
    wanted = {
        "tokens": inputs,
        "position_ids": inputs,
        "labels": targets,
        "loss_mask": targets,
        "padding_mask": True,
    }
    out = _broadcast_over_tp(batch, wanted, tp_group, dev, first_tp)
    params = _thd_params(
        cast(torch.Tensor, out["cu_seqlens_padded"]), cast(torch.Tensor, out["max_seqlen"])
    )
    padding_mask = cast(torch.Tensor, out["padding_mask"])  # always requested above
    return (
        out["tokens"],
        out["labels"],
        out["loss_mask"],
        None,
        out["position_ids"],
        params,
        padding_mask,
    )

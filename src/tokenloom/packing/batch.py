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
    tp_group, pp_group, cp_group = groups["tp"], groups["pp"], groups["cp"]
    dev = resolve_device(device, tp_group)
    first_tp = group_rank(tp_group) == 0
    stage, stages = group_rank(pp_group), group_size(pp_group)
    first = stage == 0 and vp_stage in (None, 0)
    last = stage == stages - 1 and (vp_stage is None or vp_stage == (vpp_size or 1) - 1)
    keys = (
        ("cu_seqlens", "cu_seqlens_padded", "max_seqlen")
        + (("tokens", "position_ids") if first or mtp_on_this_rank else ())
        + (("labels", "loss_mask") if last else ())
    )
    batch: dict[str, Any] = {}
    if first_tp:
        batch = _read(data_iterator, keys)
        batch["padding_mask"] = thd_padding_mask(batch["cu_seqlens"], batch["cu_seqlens_padded"])
        zero_padded_slots(batch, batch["padding_mask"])
        _slice_for_cp(batch, cp_group, first or last)
    elif data_iterator is not None:
        raise ConfigError("only TP rank 0 reads data; pass data_iterator=None on other TP ranks")
    shapes = [batch["cu_seqlens"].numel(), batch["padding_mask"].numel()] if first_tp else [0, 0]
    n_bounds, total = (
        int(v)
        for v in broadcast_scalars(
            shapes, tp_group, dev, f"{STEP}: broadcast of the shapes over the TP group", torch.int32
        )
    )
    out = {
        "tokens": _shaped(batch, "tokens", first or mtp_on_this_rank, first_tp, total, dev),
        "position_ids": _shaped(
            batch, "position_ids", first or mtp_on_this_rank, first_tp, total, dev
        ),
        "labels": _shaped(batch, "labels", last, first_tp, total, dev),
        "loss_mask": _shaped(batch, "loss_mask", last, first_tp, total, dev),
        "padding_mask": _shaped(batch, "padding_mask", True, first_tp, total, dev),
    }
    if first_tp:
        bounds, padded = batch["cu_seqlens"], batch["cu_seqlens_padded"]
        max_seqlen = _max_seqlen(batch["max_seqlen"], bounds.device)
    else:
        bounds = torch.empty(n_bounds, dtype=torch.int32, device=dev)
        padded = torch.empty(n_bounds, dtype=torch.int32, device=dev)
        max_seqlen = torch.empty(1, dtype=torch.int32, device=dev)
    for name, tensor in (
        *out.items(),
        ("cu_seqlens", bounds),
        ("cu_seqlens_padded", padded),
        ("max_seqlen", max_seqlen),
    ):  # right after the shapes: every TP rank is there
        step = f"{STEP}: broadcast of {name!r} over the TP group"
        broadcast(tensor, tp_group, step, roll_call=False)
    longest = int(max_seqlen.item())
    params = PackedSeqParams(
        qkv_format="thd",
        cu_seqlens_q=padded,
        cu_seqlens_kv=padded,
        cu_seqlens_q_padded=padded,
        cu_seqlens_kv_padded=padded,
        max_seqlen_q=longest,
        max_seqlen_kv=longest,
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

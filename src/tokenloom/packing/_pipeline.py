"""The steps of ``BasePackingScheduler.run``: fetch, unpack, pack, PP broadcast, iterators."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Optional

import torch

from tokenloom.errors import ConfigError, PackingError
from tokenloom.packing._comm import broadcast, gather_lengths
from tokenloom.packing.groups import group_rank, group_size

Sample = dict[str, torch.Tensor]
STEP = "wrap_data_iterator"
"""How errors name the collectives of ``BasePackingScheduler.run``."""
_TO_MIDDLE = f"{STEP}: broadcast of the {{}} to the middle pipeline stages over the PP group"
TOKEN_KEYS = ("tokens", "labels", "loss_mask", "position_ids")
LENGTH_KEYS = ("original_seq_len", "padded_seq_len")
METADATA_KEYS = ("max_seqlen", "cu_seqlens", "cu_seqlens_padded")
DTYPES = {
    "tokens": torch.int64,
    "labels": torch.int64,
    "loss_mask": torch.float32,
    "position_ids": torch.int64,
    "original_seq_len": torch.int64,
    "padded_seq_len": torch.int64,
}


def fetch_items(data_iterator: Iterator[Any], num_microbatches: int) -> list[Sample]:
    """Read ``num_microbatches`` items; an item is a sample dict or a list of them."""
    batch: list[Sample] = []
    for step in range(num_microbatches):
        try:
            item = next(data_iterator)
        except StopIteration:
            raise PackingError(
                f"the data iterator ended after {step} of {num_microbatches} "
                "items (num_microbatches)"
            ) from None
        if isinstance(item, dict):
            batch.append(item)
        elif isinstance(item, list) and all(isinstance(s, dict) for s in item):
            batch.extend(item)
        else:
            raise PackingError(
                f"item {step} of the data iterator is a {type(item).__name__}; "
                "it must be a sample dict or a list of sample dicts"
            )
    return batch


def _squeeze(index: int, sample: Sample) -> Sample:
    out = {}
    for key, value in sample.items():
        if isinstance(value, torch.Tensor) and value.dim() == 2:
            if value.shape[0] != 1:
                raise PackingError(
                    f"sample {index}: {key!r} has shape {tuple(value.shape)}; packing needs one "
                    "sub-sample per entry (micro_batch_size 1, or an identity collate_fn)"
                )
            value = value.squeeze(0)
        out[key] = value
    return out


def unpack_batch(batch: list[Sample]) -> list[Sample]:
    """Split packed samples (``cu_seqlens``) or take unpacked ones (``padded_seq_len``)."""
    if not batch:
        return []
    unpacked = "padded_seq_len" in batch[0]
    out: list[Sample] = []
    for index, raw in enumerate(batch):
        if ("padded_seq_len" in raw) != unpacked or ("cu_seqlens" in raw) == unpacked:
            raise PackingError(
                f"sample {index} must carry exactly one of 'padded_seq_len' (unpacked) or "
                f"'cu_seqlens' (packed), like sample 0; it has keys {sorted(raw)}"
            )
        sample = _squeeze(index, raw)
        if unpacked:
            sample.setdefault("original_seq_len", sample["padded_seq_len"].clone())
            out.append(sample)
            continue
        missing = [k for k in TOKEN_KEYS if k not in sample]
        if missing:
            raise PackingError(f"packed sample {index} is missing the key(s) {missing}")
        bounds = [int(v) for v in sample["cu_seqlens"].reshape(-1).tolist()]
        for start, end in zip(bounds, bounds[1:]):
            if end < start:
                raise PackingError(f"sample {index}: cu_seqlens {bounds} decreases")
            if end > start:
                piece = {k: sample[k][start:end] for k in TOKEN_KEYS}
                length = torch.tensor([end - start], device=sample["tokens"].device)
                piece["original_seq_len"], piece["padded_seq_len"] = length, length.clone()
                out.append(piece)
    return out


def check_required_keys(batch: Sequence[Sample], keys: Sequence[str]) -> None:
    """PackingError naming the first sub-sample that lacks a required key."""
    for index, sample in enumerate(batch):
        missing = [k for k in keys if k not in sample]
        if missing:
            raise PackingError(
                f"sub-sample {index} is missing the required key(s) {missing}; "
                f"it has {sorted(sample)}"
            )


def global_lengths(
    batch: Sequence[Sample], dp_group: Any, device: torch.device
) -> tuple[list[int], list[int]]:
    """Padded lengths of the whole DP group (global id order) and each rank's offsets."""
    mine = []
    for index, sample in enumerate(batch):
        padded = sample["padded_seq_len"].reshape(-1)
        if padded.numel() != 1 or int(padded[0]) < 0:
            raise PackingError(
                f"sub-sample {index}: padded_seq_len must hold one length >= 0, "
                f"got {padded.tolist()}"
            )
        mine.append(int(padded[0]))
    return gather_lengths(mine, dp_group, device, STEP)


def pack(samples: list[Sample], device: torch.device) -> Sample:
    """Concatenate sub-samples into one THD microbatch with cu_seqlens(_padded), max_seqlen."""
    if not samples:
        raise PackingError(
            "a microbatch of the schedule is empty; every DP x CP rank needs at "
            "least one sub-sample in each microbatch"
        )
    out = {k: torch.cat([s[k].reshape(-1).to(device) for s in samples]) for k in TOKEN_KEYS}
    padded = torch.cat([s["padded_seq_len"].reshape(-1) for s in samples]).to(device, torch.int32)
    original = torch.cat([s["original_seq_len"].reshape(-1) for s in samples]).to(
        device, torch.int32
    )
    zero = torch.zeros(1, dtype=torch.int32, device=device)
    out["cu_seqlens_padded"] = torch.cat([zero, torch.cumsum(padded, 0, dtype=torch.int32)])
    out["max_seqlen"] = padded.max()
    out["cu_seqlens"] = torch.cat([zero, torch.cumsum(original, 0, dtype=torch.int32)])
    return out


def broadcast_to_middle_stages(
    samples: Optional[list[Sample]], scalars: list[Any], pp_group: Any, device: torch.device
) -> tuple[Optional[list[Sample]], list[Any]]:
    """Give middle PP stages the THD metadata and the scalars (sums rounded to float32)."""
    if group_size(pp_group) <= 2:
        return samples, scalars
    rank, last = group_rank(pp_group), group_size(pp_group) - 1
    sums = torch.tensor(
        scalars[1:] if rank == 0 else [0.0, 0.0], dtype=torch.float32, device=device
    )
    payload = _metadata_payload(samples, scalars[0], device) if rank == 0 else None
    length = torch.tensor(
        [0 if payload is None else payload.numel()], dtype=torch.int64, device=device
    )
    broadcast(length, pp_group, _TO_MIDDLE.format("THD metadata size"))
    if payload is None:
        payload = torch.empty(int(length.item()), dtype=torch.int64, device=device)
    broadcast(payload, pp_group, _TO_MIDDLE.format("THD metadata"), roll_call=False)
    broadcast(sums, pp_group, _TO_MIDDLE.format("sequence-length sums"), roll_call=False)
    if rank in (0, last):
        return samples, scalars
    count, rebuilt = _read_metadata(payload)
    return rebuilt, [count] + sums.cpu().tolist()


def _metadata_payload(
    samples: Optional[list[Sample]], count: int, device: torch.device
) -> torch.Tensor:
    if samples is None:
        raise ConfigError(
            "PP stage 0 has no data iterator; TP rank 0 of the first and the last "
            "pipeline stage must both be given one"
        )
    parts = [torch.tensor([count], dtype=torch.int64)]
    for s in samples:
        parts.append(
            torch.tensor(
                [int(s["max_seqlen"]), s["cu_seqlens"].numel(), s["cu_seqlens_padded"].numel()],
                dtype=torch.int64,
            )
        )
        parts += [
            s["cu_seqlens"].cpu().to(torch.int64),
            s["cu_seqlens_padded"].cpu().to(torch.int64),
        ]
    return torch.cat(parts).to(device)


def _read_metadata(payload: torch.Tensor) -> tuple[int, list[Sample]]:
    values = payload.to(device=payload.device)
    count, cursor, out = int(values[0]), 1, []
    for _ in range(count):
        max_seqlen, n_cu, n_padded = (int(v) for v in values[cursor : cursor + 3])
        cursor += 3
        cu = values[cursor : cursor + n_cu].to(torch.int32)
        cursor += n_cu
        padded = values[cursor : cursor + n_padded].to(torch.int32)
        cursor += n_padded
        out.append(
            {
                "max_seqlen": torch.tensor(max_seqlen, dtype=torch.int32, device=payload.device),
                "cu_seqlens": cu,
                "cu_seqlens_padded": padded,
            }
        )
    return count, out


def make_iterators(
    samples: Optional[list[Sample]], pp_group: Any, tp_group: Any, vpp_size: Optional[int]
) -> Any:
    """Megatron's iterator layout: one iterator, or a list of ``vpp_size`` with VPP."""
    first_tp = group_rank(tp_group) == 0
    if vpp_size is None or vpp_size <= 1:
        return iter(samples or []) if first_tp else None
    if not first_tp:
        return [None] * vpp_size
    stage, last = group_rank(pp_group), group_size(pp_group) - 1
    if stage not in (0, last):
        return [iter(samples or []) for _ in range(vpp_size)]
    metadata = [{k: s[k] for k in METADATA_KEYS} for s in samples or []]
    others = [iter(metadata) for _ in range(vpp_size - 1)]
    return [iter(samples or [])] + others if stage == 0 else others + [iter(samples or [])]

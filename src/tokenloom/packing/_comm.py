"""Collectives of the packing path: gather lengths, broadcast, and all-to-all rerouting.

Every function takes the device to stage tensors on (CPU for gloo, a CUDA device for
NCCL) and is a no-op or a local copy when the group has a single member, so the
packing path also runs in one process without ``torch.distributed``.  Each takes a
``step`` that names the call (``"wrap_data_iterator: ... over DP"``); every collective
goes through :func:`tokenloom.distributed.collectives.run_collective`, so it is bounded
by ``TOKENLOOM_DISTRIBUTED_TIMEOUT_S`` and ends in a ``DistributedError`` naming the
group, the step and (gloo) the rank that did not answer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Optional

import torch

from tokenloom.distributed.collectives import run_collective
from tokenloom.errors import PackingError
from tokenloom.packing.groups import group_rank, group_ranks, group_size


def resolve_device(device: Any, group: Any = None) -> torch.device:
    """``device`` if given; else the current CUDA device for an NCCL group, else the CPU."""
    if device is not None:
        return torch.device(device)
    if group is not None and group_size(group) > 1:
        import torch.distributed as dist

        if str(dist.get_backend(group)).lower() == "nccl":
            return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def gather_lengths(
    lengths: Sequence[int], group: Any, device: torch.device, step: str
) -> tuple[list[int], list[int]]:
    """All-gather every DP member's list of lengths; return ``(all lengths, offsets)``.

    ``offsets`` has ``size + 1`` entries: member ``d`` holds ``offsets[d]:offsets[d+1]``.
    """
    mine = torch.tensor(list(lengths), dtype=torch.int64, device=device)
    size = group_size(group)
    if size == 1:
        return mine.tolist(), [0, len(lengths)]
    import torch.distributed as dist

    count = torch.tensor([mine.numel()], dtype=torch.int64, device=device)
    counts = [torch.zeros_like(count) for _ in range(size)]
    run_collective(
        group,
        f"{step}: all_gather of the sub-sample counts over the DP group",
        lambda: dist.all_gather(counts, count, group=group, async_op=True),
    )
    sizes = [int(c.item()) for c in counts]
    padded = torch.zeros(max(sizes), dtype=torch.int64, device=device)
    padded[: mine.numel()] = mine
    gathered = [torch.empty_like(padded) for _ in range(size)]
    run_collective(
        group,
        f"{step}: all_gather of the sub-sample lengths over the DP group",
        lambda: dist.all_gather(gathered, padded, group=group, async_op=True),
        roll_call=False,  # right after the counts: every member is there
    )
    values = [v for d, t in enumerate(gathered) for v in t[: sizes[d]].tolist()]
    offsets = [0]
    for n in sizes:
        offsets.append(offsets[-1] + n)
    return values, offsets


def broadcast(
    tensor: Optional[torch.Tensor], group: Any, step: str, roll_call: bool = True
) -> None:
    """Broadcast ``tensor`` in place from the group's first member (skipped for None).

    ``roll_call=False`` right after another collective over the same group (see
    :func:`~tokenloom.distributed.collectives.run_collective`).
    """
    if tensor is None or group_size(group) == 1:
        return
    import torch.distributed as dist

    source = group_ranks(group)[0]
    run_collective(
        group,
        step,
        lambda: dist.broadcast(tensor, source, group=group, async_op=True),
        roll_call=roll_call,
    )


def broadcast_scalars(
    values: Sequence[Any],
    group: Any,
    device: torch.device,
    step: str,
    dtype: torch.dtype = torch.float32,
) -> list[Any]:
    """Send the first member's scalars to the others (as ``dtype``, like Megatron)."""
    if group_size(group) == 1:
        return list(values)
    if group_rank(group) == 0:
        payload = torch.tensor(list(values), dtype=dtype, device=device)
    else:
        payload = torch.zeros(len(values), dtype=dtype, device=device)
    broadcast(payload, group, step)
    return list(values) if group_rank(group) == 0 else payload.cpu().tolist()


def all_to_all(
    send: torch.Tensor,
    send_splits: list[int],
    recv_splits: list[int],
    group: Any,
    step: str,
    roll_call: bool = True,
) -> torch.Tensor:
    """``all_to_all_single`` with explicit splits (a copy for a one-member group)."""
    recv = torch.empty(sum(recv_splits), dtype=send.dtype, device=send.device)
    if group_size(group) == 1:
        recv.copy_(send)
        return recv
    import torch.distributed as dist

    run_collective(
        group,
        step,
        lambda: dist.all_to_all_single(
            recv,
            send,
            output_split_sizes=recv_splits,
            input_split_sizes=send_splits,
            group=group,
            async_op=True,
        ),
        roll_call=roll_call,
    )
    return recv


class Route:
    """Who sends which sub-sample to whom, from a schedule over the DP x CP group.

    ``offsets`` are the DP ranks' global-id ranges (from :func:`gather_lengths`);
    ``assigned[r]`` is the sorted list of global ids DP x CP rank ``r`` runs.
    """

    def __init__(
        self,
        sample_id_groups: Sequence[Sequence[Sequence[int]]],
        offsets: list[int],
        dp_group: Any,
        dp_cp_group: Any,
    ) -> None:
        self.total = group_size(dp_cp_group)
        self.me = group_rank(dp_cp_group) if self.total > 1 else 0
        dcp_members = group_ranks(dp_cp_group) if self.total > 1 else [0]
        dp_members = group_ranks(dp_group) if group_size(dp_group) > 1 else [dcp_members[self.me]]
        position = {rank: i for i, rank in enumerate(dcp_members)}
        missing = [r for r in dp_members if r not in position]
        if missing:
            raise PackingError(
                f"ranks {missing} of the DP group are not in the DP x CP group; "
                "build pg_collection with build_pg_collection"
            )
        self.dp_to_dcp = [position[r] for r in dp_members]
        self.offsets = offsets
        self.my_dp = group_rank(dp_group) if group_size(dp_group) > 1 else 0
        self.assigned: list[list[int]] = [[] for _ in range(self.total)]
        for microbatch in sample_id_groups:
            if len(microbatch) != self.total:
                raise PackingError(
                    f"a microbatch of the schedule has {len(microbatch)} rank "
                    f"lists, the DP x CP group has {self.total} ranks"
                )
            for rank, ids in enumerate(microbatch):
                self.assigned[rank].extend(int(i) for i in ids)
        for ids in self.assigned:
            ids.sort()

    def source(self, gid: int) -> int:
        """DP x CP rank (same CP rank as this one) that holds global id ``gid``."""
        for d in range(len(self.offsets) - 1):
            if self.offsets[d] <= gid < self.offsets[d + 1]:
                return self.dp_to_dcp[d]
        raise PackingError(f"global id {gid} is outside 0..{self.offsets[-1] - 1}")

    def sends(self) -> list[list[int]]:
        """Per destination DP x CP rank, the local global ids to send, in order."""
        low, high = self.offsets[self.my_dp], self.offsets[self.my_dp + 1]
        peers = set(self.dp_to_dcp)
        return [
            [g for g in self.assigned[dest] if low <= g < high] if dest in peers else []
            for dest in range(self.total)
        ]

    def receives(self) -> list[list[int]]:
        """Per source DP x CP rank, the global ids to receive, in order."""
        out: list[list[int]] = [[] for _ in range(self.total)]
        for gid in self.assigned[self.me]:
            out[self.source(gid)].append(gid)
        return out


def reroute(
    local: dict[int, dict[str, torch.Tensor]],
    lengths: Sequence[int],
    route: Route,
    dp_cp_group: Any,
    device: torch.device,
    dtypes: dict[str, torch.dtype],
    step: str,
    one_element_keys: Sequence[str] = (),
) -> dict[int, dict[str, torch.Tensor]]:
    """Move sub-samples to the DP x CP ranks that run them; return ``{gid: sample}``.

    ``local`` maps this rank's global ids to their sub-samples; ``lengths[gid]`` is
    the token count of every key, except ``one_element_keys`` (one element each).
    ``dtypes`` names the keys to move and their dtype (the same on every rank);
    ``step`` names the caller in errors.
    """
    sends, receives = route.sends(), route.receives()
    order = [g for ids in receives for g in ids]
    out: dict[int, dict[str, torch.Tensor]] = {g: {} for g in order}

    def size(key: str, gid: int) -> int:
        return 1 if key in one_element_keys else int(lengths[gid])

    _check_sizes(local, [g for ids in sends for g in ids], dtypes, size)  # before any exchange
    for index, (key, dtype) in enumerate(dtypes.items()):
        parts = [
            local[gid][key].reshape(-1).to(device=device, dtype=dtype)
            for ids in sends
            for gid in ids
        ]
        send = torch.cat(parts) if parts else torch.empty(0, dtype=dtype, device=device)
        recv = all_to_all(
            send,
            [sum(size(key, g) for g in ids) for ids in sends],
            [sum(size(key, g) for g in ids) for ids in receives],
            dp_cp_group,
            f"{step}: all_to_all of {key!r} over the DP x CP group",
            roll_call=index == 0,
        )
        cursor = 0
        for gid in order:
            n = size(key, gid)
            out[gid][key] = recv[cursor : cursor + n]
            cursor += n
    return out


def _check_sizes(
    local: dict[int, dict[str, torch.Tensor]],
    gids: list[int],
    keys: dict[str, torch.dtype],
    size: Callable[[str, int], int],
) -> None:
    """PackingError for a sub-sample that lacks a key or whose tensor has the wrong size."""
    for gid in gids:
        for key in keys:
            if key not in local[gid]:
                raise PackingError(
                    f"sub-sample {gid} lacks {key!r} (it has {sorted(local[gid])}); every "
                    "sub-sample must carry the keys of the first one"
                )
            count = local[gid][key].numel()
            if count != size(key, gid):
                raise PackingError(
                    f"sub-sample {gid}: {key!r} has {count} elements, expected "
                    f"{size(key, gid)} (its padded_seq_len); every token tensor of a "
                    "sub-sample must have its padded length"
                )

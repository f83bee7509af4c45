"""One gloo rank of tests/training/test_mixture_resume.py's DP test (run as a script)."""

from __future__ import annotations

import os
import pickle
import sys
from pathlib import Path
from typing import Any

import torch.distributed as dist

MBS, STEPS = 2, 6


def main(scenario: str, out_dir: str) -> None:
    from tests.support import distributed_harness as harness
    from tests.training._mixture_reference import build, ramp_tail, reference, same, state_after

    from tokenloom.training import build_pretraining_data_loader

    rank, world = harness.init_worker()
    a, b, c = os.environ["MIXTURE_PREFIXES"].split(",")
    cache = Path(out_dir) / f"cache{rank}"  # each rank builds its own (no race on a cache)
    old_phases, new_phases = None, None
    if scenario == "ramp":  # schedules on both sides, the resume (sample 10) in a ramp
        old_phases = [(0, [1.0, 1.0]), (4, [1.0, 3.0], "linear"), (30, [1.0, 1.0])]
        new_phases = [(0, [1.0, 1.0, 1.0]), (6, [3.0, 1.0, 1.0], "linear"), (40, [1, 1, 4])]
    old = build([a, b], [1.0, 1.0], 96, cache, schedule=old_phases)
    new = build([a, b, c], [1.0, 2.0, 3.0], 200, cache, split="90,10,0", schedule=new_phases)
    state = state_after(old, 5, micro_batch_size=MBS) if rank == 0 else None
    shared: list[Any] = [pickle.dumps(state)]
    dist.broadcast_object_list(shared, src=0)  # the saved state travels over gloo
    loader = build_pretraining_data_loader(
        new,
        0,
        micro_batch_size=MBS,
        data_parallel_rank=rank,
        data_parallel_size=world,
        num_workers=rank % 2,
    )
    saved = pickle.loads(shared[0])
    loader.load_state_dict(saved, allow_mixture_change=True)
    mine = []
    for batch in loader:
        mine.append(batch["tokens"].numpy())
        if len(mine) == STEPS:
            break
    del loader
    gathered: list[Any] = [None] * world
    dist.all_gather_object(gathered, mine)
    order = [row for step in range(STEPS) for r in range(world) for row in gathered[r][step]]
    consumed = saved["consumed_samples"]
    orders: dict[str, Any] = {}
    if old_phases is not None and new_phases is not None:
        orders = {
            "old_order": ramp_tail(old_phases, 0, consumed),
            "new_order": ramp_tail(new_phases, consumed, len(order)),
        }
    want, _ = reference(old, consumed, new, len(order), **orders)
    harness.write_result(out_dir, rank, {"same": bool(same(order, want)), "rows": len(order)})
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    main(sys.argv[1], sys.argv[2])

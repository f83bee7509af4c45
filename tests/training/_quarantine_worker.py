"""One gloo rank of tests/training/test_quarantine.py's DP test (run as a script)."""

from __future__ import annotations

import os
import pickle
import sys
from pathlib import Path
from typing import Any

import numpy
import torch.distributed as dist
from tests.support import distributed_harness as harness
from tests.training._data import build_train

from tokenloom.training import build_pretraining_data_loader

SKIP = [(2, 4), (9, 10)]


def tokens(loader: Any, count: int) -> list[list]:
    out = []
    for batch in loader:
        out.append(batch["tokens"].numpy().tolist())
        if len(out) == count:
            break
    return out


def main(kind: str, out_dir: str) -> None:
    rank, world = harness.init_worker()
    data = build_train(
        [os.environ["QUARANTINE_PREFIX"]], Path(out_dir) / "cache", 240, sequence_length=16
    )
    options = dict(
        micro_batch_size=2,
        dataloader_type=kind,
        data_parallel_rank=rank,
        data_parallel_size=world,
        num_workers=rank % 2,
    )
    base = tokens(build_pretraining_data_loader(data, 0, **options), 30)
    want = [base[s] for s in range(30) if s not in {2, 3, 9}][:20]
    first = build_pretraining_data_loader(data, 0, skip_batches=SKIP, **options)
    got = tokens(first, 8)
    states: list[Any] = [None] * world
    dist.all_gather_object(states, pickle.dumps(first.state_dict()))  # a real collective
    del first
    second = build_pretraining_data_loader(data, 0, **options)  # the state keeps the skips
    second.load_state_dict(pickle.loads(states[rank]))
    got += tokens(second, 12)
    del second
    served: list[Any] = [None] * world
    dist.all_gather_object(served, numpy.asarray(got).sum().item())
    harness.write_result(out_dir, rank, {"same": got == want, "served": served})
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    main(sys.argv[1], sys.argv[2])

"""One gloo rank: megatron-core's and tokenloom's HybridCPDataLoaderWrapper on random batches.

``python _megatron_hybrid_worker.py all OUT_DIR`` on 4 ranks; layouts DP=2 x CP=2,
DP=4 x CP=1 and DP=1 x CP=4, a few random steps each; both wrappers get the same
groups and inputs, and this rank stores both outputs.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.packing import _megatron_shims  # noqa: E402

_megatron_shims.install()

import torch  # noqa: E402
from megatron.core.datasets.data_schedule import (  # noqa: E402
    HybridCPDataLoaderWrapper as MegatronWrapper,
)
from tests.packing import _cases as cases  # noqa: E402
from tests.packing._worker import make_groups  # noqa: E402
from tests.support.distributed_harness import init_worker, write_result  # noqa: E402

from tokenloom.packing import HybridCPDataLoaderWrapper, rank_coordinates  # noqa: E402

LAYOUTS = ((2, 2), (4, 1), (1, 4))  # (dp, cp)
STEPS = 3


def packed_batch(rng: random.Random, limit: int, total: int) -> list[dict]:
    """A list of packed samples; some sub-samples are empty, some have trailing tokens."""
    batch = []
    for s in range(rng.randint(1, 3)):
        lengths = [
            rng.choice([0] + [rng.randint(1, limit * total)] * 6) for _ in range(rng.randint(1, 4))
        ]
        bounds = [0]
        for n in lengths:
            bounds.append(bounds[-1] + n)
        size = bounds[-1] + rng.choice([0, 0, 3])
        base = 1000 * (s + 1)
        batch.append(
            {
                "tokens": torch.arange(base, base + size),
                "labels": torch.arange(base + 1, base + size + 1),
                "loss_mask": torch.ones(size, dtype=torch.float32),
                "position_ids": torch.arange(size),
                "cu_seqlens": torch.tensor(bounds, dtype=torch.int32),
                "max_seqlen": torch.tensor([max(lengths)], dtype=torch.int32),
            }
        )
    if all(int(b["cu_seqlens"][-1]) == 0 for b in batch):
        batch[0]["cu_seqlens"][-1] = 1
    return batch


def one_layout(me: int, dp: int, cp: int) -> dict:
    pg = make_groups(dp * cp, 1, cp, 1, me)
    if pg is None:
        return {}
    dp_rank = rank_coordinates(me, dp * cp, 1, cp, 1).dp
    limit = 8
    rng = random.Random(f"hybrid/{dp}/{cp}/{dp_rank}")
    steps = [packed_batch(rng, limit, dp * cp) for _ in range(STEPS)]
    config = SimpleNamespace(max_seqlen_per_dp_cp_rank=limit)
    namespace = SimpleNamespace(dp_cp=pg.dp_cp, dp=pg.dp, tp=pg.tp)
    out: dict[str, Any] = {}
    for name, cls in (("megatron", MegatronWrapper), ("tokenloom", HybridCPDataLoaderWrapper)):
        wrapper = cls(iter([[dict(s) for s in step] for step in steps]), config, namespace)
        records = []
        for _ in range(STEPS):
            samples, groups = next(wrapper)
            assert samples is not None
            records.append(
                {
                    "groups": groups,
                    "ids": [int(i) for i in samples],
                    "samples": cases.to_lists(samples),
                    "dtypes": {
                        str(k): {f: cases.dtype_name(t) for f, t in v.items()}
                        for k, v in samples.items()
                    },
                }
            )
        out[name] = records
    return out


def main() -> None:
    rank, _ = init_worker()
    result = {f"dp{dp}_cp{cp}": one_layout(rank, dp, cp) for dp, cp in LAYOUTS}
    write_result(sys.argv[2], rank, result)
    import torch.distributed as dist

    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""One gloo rank of the packing tests: ``python _worker.py all OUT_DIR`` (8 ranks).

Runs every golden layout of ``wrap_data_iterator/`` and ``hybrid_cp_wrapper/`` and the
random layouts of ``_cases.RANDOM_LAYOUTS`` on sub-groups of one 8-rank world (ranks
beyond a layout's world size only take part in ``new_group``), and stores what this
rank saw for the test to compare.
"""

from __future__ import annotations

import sys
from types import SimpleNamespace
from typing import Any, Optional

from tests.packing import _cases as cases
from tests.support.distributed_harness import init_worker, write_result

from tokenloom.errors import TokenloomError
from tokenloom.packing import (
    HybridCPDataLoaderWrapper,
    ProcessGroupCollection,
    get_batch_on_this_rank_for_sequence_packing,
    layout_groups,
    rank_coordinates,
    wrap_data_iterator,
)


def make_groups(world: int, tp: int, cp: int, pp: int, me: int) -> Optional[ProcessGroupCollection]:
    """Create a layout's groups on the first ``world`` ranks (collective on all 8)."""
    import torch.distributed as dist

    mine: dict[str, Any] = {}
    for kind, members in layout_groups(world, tp, cp, pp).items():
        for ranks in members:
            group = dist.new_group(list(ranks))
            if me in ranks:
                mine[kind] = group
    return ProcessGroupCollection(**mine) if me < world else None


def stage_iterators(items: list, coords: Any, pp: int, vpp: Optional[int]) -> Any:
    """Megatron's unit-test layout of data iterators (TP 0 of the first and last stage)."""
    has = coords.tp == 0 and coords.pp in (0, pp - 1)
    it = iter(items) if has else None
    if not vpp:
        return it
    first, last = coords.pp == 0, coords.pp == pp - 1
    return [it if first else None, it if (last and not first) else None]


def run_batches(new_it: Any, n_mb: int, vpp: Optional[int], pg: Any) -> list[dict]:
    """Every microbatch of every vp stage: the packed dict and get_batch's outputs."""
    stages = []
    for v in range(vpp) if vpp else [None]:
        it_v = new_it[v] if vpp else new_it
        microbatches = []
        for m in range(n_mb):
            packed = next(it_v) if it_v is not None else None
            out = get_batch_on_this_rank_for_sequence_packing(
                iter([packed]) if packed is not None else None,
                vpp_size=vpp,
                mtp_on_this_rank=False,
                vp_stage=v,
                pg_collection=pg,
            )
            tokens, labels, loss_mask, attention, position_ids, params, padding = out
            named = {
                "tokens": tokens,
                "labels": labels,
                "loss_mask": loss_mask,
                "position_ids": position_ids,
                "padding_mask": padding,
            }
            microbatches.append(
                {
                    "microbatch": m,
                    "packed": cases.to_lists(packed),
                    "packed_dtypes": None
                    if packed is None
                    else {k: cases.dtype_name(t) for k, t in packed.items()},
                    **{k: None if t is None else t.reshape(-1).tolist() for k, t in named.items()},
                    "attention_mask": attention,
                    "shapes": {k: None if t is None else list(t.shape) for k, t in named.items()},
                    "dtypes": {
                        k: None if t is None else cases.dtype_name(t) for k, t in named.items()
                    },
                    "packed_seq_params": {
                        "qkv_format": params.qkv_format,
                        **{
                            k: getattr(params, k).tolist()
                            for k in (
                                "cu_seqlens_q",
                                "cu_seqlens_kv",
                                "cu_seqlens_q_padded",
                                "cu_seqlens_kv_padded",
                            )
                        },
                        "max_seqlen_q": params.max_seqlen_q,
                        "max_seqlen_kv": params.max_seqlen_kv,
                    },
                }
            )
        stages.append({"vp_stage": v, "microbatches": microbatches})
    return stages


def run_wrap(
    me: int, items_by_dp: list, sizes: tuple, config: dict, num_microbatches: int
) -> Optional[dict]:
    tp, cp, dp, pp, vpp = sizes
    world = tp * cp * dp * pp
    pg = make_groups(world, tp, cp, pp, me)
    if pg is None:
        return None
    coords = rank_coordinates(me, world, tp, cp, pp)
    it = stage_iterators(items_by_dp[coords.dp], coords, pp, vpp)
    try:
        new_it, n_mb, total, squares = wrap_data_iterator(
            it, SimpleNamespace(**config), num_microbatches, pg
        )
    except TokenloomError as error:
        return {"wrap_data_iterator": {"error": type(error).__name__, "message": str(error)}}
    return {
        "num_micro_batches": n_mb,
        "num_micro_batches_type": type(n_mb).__name__,
        "seqlen_sum_this_global_batch": total,
        "seqlen_squared_sum_this_global_batch": squares,
        "new_iterator": [None if i is None else "iterator" for i in (new_it if vpp else [new_it])],
        "stages": run_batches(new_it, n_mb, vpp, pg),
    }


def golden_wrap(me: int) -> dict:
    out: dict[str, Any] = {}
    for layout in cases.WRAP_LAYOUTS:
        data = cases.load(f"wrap_data_iterator/{layout}.json")
        meta = data["meta"]
        items = [
            [
                [cases.to_tensors(s) for s in item]
                if isinstance(item, list)
                else cases.to_tensors(item)
                for item in rank_items
            ]
            for rank_items in data["inputs_by_dp_rank"]
        ]
        sizes = (
            meta["tensor_model_parallel_size"],
            meta["context_parallel_size"],
            meta["data_parallel_size"],
            meta["pipeline_model_parallel_size"],
            meta["virtual_pipeline_model_parallel_size"],
        )
        out[layout] = run_wrap(me, items, sizes, meta["config"], meta["num_microbatches"])
    return out


def golden_hybrid(me: int) -> dict:
    out: dict[str, Any] = {}
    for layout in cases.HYBRID_LAYOUTS:
        data = cases.load(f"hybrid_cp_wrapper/{layout}.json")
        meta = data["meta"]
        cp, dp = meta["context_parallel_size"], meta["data_parallel_size"]
        pg = make_groups(cp * dp, 1, cp, 1, me)
        if pg is None:
            out[layout] = None
            continue
        dp_rank = rank_coordinates(me, cp * dp, 1, cp, 1).dp
        steps = [[cases.to_tensors(s) for s in step[dp_rank]] for step in data["inputs"]]
        wrapper = HybridCPDataLoaderWrapper(iter(steps), SimpleNamespace(**meta["config"]), pg)
        records = []
        for _ in range(meta["steps"]):
            samples, groups = next(wrapper)
            assert samples is not None
            records.append(
                {
                    "sample_id_groups": groups,
                    "received_ids": list(samples),
                    "samples": cases.to_lists(samples),
                    "dtypes": {
                        k: cases.dtype_name(t) for k, t in next(iter(samples.values())).items()
                    },
                }
            )
        out[layout] = records
    return out


def random_runs(me: int) -> dict:
    out: dict[str, Any] = {}
    for name, tp, cp, dp, pp, vpp, mbgs, limit in cases.RANDOM_LAYOUTS:
        for scheduler in cases.RANDOM_SCHEDULERS:
            items = [cases.random_sequences(name, scheduler, d, cp) for d in range(dp)]
            config = {
                "max_seqlen_per_dp_cp_rank": limit,
                "microbatch_group_size_per_vp_stage": mbgs,
                "virtual_pipeline_model_parallel_size": vpp,
                "sequence_packing_scheduler": scheduler,
            }
            out[f"{name}/{scheduler}"] = run_wrap(
                me, items, (tp, cp, dp, pp, vpp), config, cases.RANDOM_MICROBATCHES
            )
    return out


def main() -> None:
    out_dir = sys.argv[2]
    rank, _ = init_worker()
    result = {"wrap": golden_wrap(rank), "hybrid": golden_hybrid(rank), "random": random_runs(rank)}
    write_result(out_dir, rank, result)
    import torch.distributed as dist

    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""Packing with real gloo process groups: golden layouts and random batches, 8 ranks, one launch.

Golden: every rank of every ``wrap_data_iterator/`` and ``hybrid_cp_wrapper/`` layout
gets exactly what Megatron's code gave (TP=2, PP=3 with VPP=2, DP=2 x CP=2, DP=4 x
CP=1, CP=4, the middle stage's float32 sums, the error layout).  Random (DP=2 x CP=2,
DP=4 x CP=1, TP=2, PP=3 with VPP=2; DpBalanced and CostBalanced): every sequence is
delivered exactly once, its tokens intact, cu_seqlens match the packed tokens, and the
microbatch count agrees on all ranks.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.packing import _cases as cases
from tests.support import distributed_harness as harness

from tokenloom.packing import layout_groups, rank_coordinates, thd_partitioned_indices

pytestmark = [
    pytest.mark.distributed,
    pytest.mark.slow,
    pytest.mark.skipif(
        bool(cases.golden_missing_reason()),
        reason=cases.golden_missing_reason() or "golden present",
    ),
]
WORKER = str(Path(__file__).with_name("_worker.py"))
WORLD = 8


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    out = tmp_path_factory.mktemp("packing_gloo")
    return harness.launch(WORKER, "all", out, WORLD, timeout=420)


@pytest.mark.timeout(480)
@pytest.mark.parametrize("layout", cases.WRAP_LAYOUTS)
def test_wrap_data_iterator_matches_golden(results: list[dict], layout: str) -> None:
    golden = cases.load(f"wrap_data_iterator/{layout}.json")
    for record in golden["ranks"]:
        mine = results[record["rank"]]["wrap"][layout]
        where = f"{layout} rank {record['rank']}"
        if "wrap_data_iterator" in record:
            assert mine["wrap_data_iterator"]["error"] == "PackingError", where
            assert "not enough sequences" in mine["wrap_data_iterator"]["message"], where
            continue
        for key in (
            "num_micro_batches",
            "num_micro_batches_type",
            "seqlen_sum_this_global_batch",
            "seqlen_squared_sum_this_global_batch",
        ):
            assert mine[key] == record[key], f"{where}: {key}"
        assert [i is None for i in mine["new_iterator"]] == [
            i is None for i in record["new_iterator"]
        ], where
        assert len(mine["stages"]) == len(record["stages"]), where
        for got, want in zip(mine["stages"], record["stages"]):
            assert got["vp_stage"] == want["vp_stage"], where
            assert len(got["microbatches"]) == len(want["microbatches"]), where
            for g, w in zip(got["microbatches"], want["microbatches"]):
                for key, value in w.items():
                    assert g[key] == value, (
                        f"{where} vp {want['vp_stage']} mb {w['microbatch']}: {key}"
                    )


@pytest.mark.timeout(480)
def test_wrap_layout_groups_match_golden_process_groups() -> None:
    for layout in cases.WRAP_LAYOUTS:
        golden = cases.load(f"wrap_data_iterator/{layout}.json")
        meta = golden["meta"]
        sizes = (
            meta["world_size"],
            meta["tensor_model_parallel_size"],
            meta["context_parallel_size"],
            meta["pipeline_model_parallel_size"],
        )
        groups = layout_groups(*sizes)
        for record in golden["ranks"]:
            coords = rank_coordinates(record["rank"], *sizes)
            assert (coords.tp, coords.cp, coords.dp, coords.pp) == (
                record["tp_rank"],
                record["cp_rank"],
                record["dp_rank"],
                record["pp_rank"],
            )
            for kind, ranks in record["process_groups"].items():
                mine = [g for g in groups[kind] if record["rank"] in g]
                assert mine == [tuple(ranks)], f"{layout} rank {record['rank']} {kind}"


@pytest.mark.timeout(480)
@pytest.mark.parametrize("layout", cases.HYBRID_LAYOUTS)
def test_hybrid_cp_wrapper_matches_golden(results: list[dict], layout: str) -> None:
    golden = cases.load(f"hybrid_cp_wrapper/{layout}.json")
    for record in golden["ranks"]:
        mine = results[record["rank"]]["hybrid"][layout]
        for step, (got, want) in enumerate(zip(mine, record["steps"])):
            where = f"{layout} rank {record['rank']} step {step}"
            assert got["sample_id_groups"] == want["sample_id_groups"], where
            assert got["received_ids"] == want["received_ids"], where
            assert got["samples"] == want["samples"], where
            assert got["dtypes"] == want["dtypes"], where


def _expected_sequences(name: str, scheduler: str, dp: int, cp: int) -> dict[tuple, list]:
    """(dp_rank, k) -> the original tokens of every random sequence."""
    out = {}
    for d in range(dp):
        k = 0
        for item in cases.random_sequences(name, scheduler, d, cp):
            for sample in item:
                n = int(sample["original_seq_len"][0])
                out[(d, k)] = sample["tokens"][:n].tolist()
                k += 1
    return out


def _delivered(results: list[dict], key: str, world: tuple) -> list[tuple]:
    """Every sequence found in the packed microbatches of CP rank 0 / TP rank 0 / stage 0."""
    tp, cp, dp, pp = world
    seen = []
    for rank in range(tp * cp * dp * pp):
        coords = rank_coordinates(rank, tp * cp * dp * pp, tp, cp, pp)
        record = results[rank]["random"][key]
        if coords.tp or coords.cp or coords.pp:
            continue
        for mb in record["stages"][0]["microbatches"]:
            packed = mb["packed"]
            bounds, padded = packed["cu_seqlens"], packed["cu_seqlens_padded"]
            assert len(packed["tokens"]) == padded[-1], key
            for i in range(len(bounds) - 1):
                length = bounds[i + 1] - bounds[i]
                start = padded[i]
                assert padded[i + 1] - start >= length, key
                tokens = packed["tokens"][start : start + length]
                seen.append((tokens[0] // 1_000_000 - 1, tokens[0] % 1_000_000 // 1000, tokens))
    return seen


@pytest.mark.timeout(480)
@pytest.mark.parametrize("layout", cases.RANDOM_LAYOUTS, ids=lambda x: x[0])
@pytest.mark.parametrize("scheduler", cases.RANDOM_SCHEDULERS)
def test_random_batches_delivered_exactly_once(
    results: list[dict], layout: tuple, scheduler: str
) -> None:
    name, tp, cp, dp, pp, vpp, group, _ = layout
    key = f"{name}/{scheduler}"
    world = tp * cp * dp * pp
    counts = {results[r]["random"][key]["num_micro_batches"] for r in range(world)}
    assert len(counts) == 1, f"{key}: microbatch counts differ across ranks: {counts}"
    count = counts.pop()
    assert count % (group if vpp else 1) == 0, f"{key}: {count} microbatches with VPP"
    expected = _expected_sequences(name, scheduler, dp, cp)
    seen = _delivered(results, key, (tp, cp, dp, pp))
    assert sorted((d, k) for d, k, _ in seen) == sorted(expected), key
    for d, k, tokens in seen:
        assert tokens == expected[(d, k)], f"{key}: sequence {(d, k)} arrived changed"
    for rank in range(world):
        coords = rank_coordinates(rank, world, tp, cp, pp)
        record = results[rank]["random"][key]
        assert len(record["stages"]) == (vpp or 1)
        assert all(len(stage["microbatches"]) == count for stage in record["stages"]), key
        if coords.pp == 0 and cp > 1:
            _check_cp_slice(results, key, rank, world, (tp, cp, pp))


def _check_cp_slice(results: list[dict], key: str, rank: int, world: int, sizes: tuple) -> None:
    """get_batch's tokens on this CP rank are its THD share of CP rank 0's packed tokens."""
    import torch

    tp, cp, pp = sizes
    coords = rank_coordinates(rank, world, tp, cp, pp)
    source = rank - coords.cp * tp - coords.tp
    for mine, packed_mb in zip(
        results[rank]["random"][key]["stages"][0]["microbatches"],
        results[source]["random"][key]["stages"][0]["microbatches"],
    ):
        packed = packed_mb["packed"]
        padded = torch.tensor(packed["cu_seqlens_padded"], dtype=torch.int32)
        index = thd_partitioned_indices(padded, int(padded[-1]), cp, coords.cp).tolist()
        full = [0 if m else t for t, m in zip(packed["tokens"], _mask(packed))]
        assert mine["tokens"] == [full[i] for i in index], f"{key} rank {rank}"


def _mask(packed: dict) -> list[bool]:
    """True on the padded slots of a packed microbatch."""
    out = []
    bounds, padded = packed["cu_seqlens"], packed["cu_seqlens_padded"]
    for i in range(len(bounds) - 1):
        n, p = bounds[i + 1] - bounds[i], padded[i + 1] - padded[i]
        out += [False] * n + [True] * (p - n)
    return out

"""Golden vectors: BalancedCP, DpBalanced and the THD partition, case by case.

Deliberate differences (docs/packing.md): a DP x CP size that is not a power of two
is a ConfigError for BalancedCP even where Megatron happens to succeed (edge case
``dp_cp_size 6``), and DpBalanced raises PackingError for a sequence longer than
``max_seqlen_per_dp_cp_rank * cp_size`` where Megatron gives it a group of its own.
"""

from __future__ import annotations

import pytest
import torch
from tests.packing import _cases as cases

from tokenloom.errors import ConfigError, PackingError, TokenloomError
from tokenloom.packing import BalancedCPScheduler, DpBalancedScheduler, thd_partitioned_indices

pytestmark = pytest.mark.skipif(
    bool(cases.golden_missing_reason()), reason=cases.golden_missing_reason() or "golden present"
)


def _golden(name: str) -> list[dict]:
    if cases.golden_missing_reason():
        return []
    return cases.load(name)["cases"]


BCP = _golden("balanced_cp_scheduler.json")
DPB = _golden("dp_balanced_scheduler.json")
THD = _golden("thd_partition.json")


def _over_cap(case: dict) -> bool:
    cap = case["max_seqlen_per_dp_cp_rank"] * case["cp_size"]
    return any(n > cap for _, n in case["sample_id_seqlens"])


@pytest.mark.parametrize("case", BCP, ids=[c["id"] for c in BCP])
def test_balanced_cp_scheduler_golden(case: dict) -> None:
    items = [tuple(x) for x in case["sample_id_seqlens"]]
    size = case["dp_cp_size"]
    if size & (size - 1):
        with pytest.raises(ConfigError, match="power of two"):
            BalancedCPScheduler(case["max_seq_len_per_rank"], size)
        return
    scheduler = BalancedCPScheduler(case["max_seq_len_per_rank"], size)
    if "error" in case:
        with pytest.raises(PackingError) as caught:
            scheduler.get_groups_and_subsamples(items, None)
        assert not isinstance(caught.value, AssertionError)
        return
    seqlens, ids = scheduler.get_groups_and_subsamples(items, None)
    assert seqlens == case["seqlen_groups"]
    assert ids == case["sample_id_groups"]


@pytest.mark.parametrize("case", DPB, ids=[c["id"] for c in DPB])
def test_dp_balanced_scheduler_golden(case: dict) -> None:
    args = (
        case["max_seqlen_per_dp_cp_rank"],
        case["cp_size"],
        case["dp_size"],
        case["microbatch_group_size_per_vp_stage"],
    )
    items = [tuple(x) for x in case["sample_id_seqlens"]]
    if case.get("error") == "ZeroDivisionError":
        with pytest.raises(ConfigError, match="positive int"):
            DpBalancedScheduler(*args)
        return
    scheduler = DpBalancedScheduler(*args)
    if _over_cap(case):
        with pytest.raises(PackingError, match="tokens, more than"):
            scheduler.get_groups_and_subsamples(items)
        return
    if "error" in case:
        with pytest.raises(PackingError, match="not enough sequences"):
            scheduler.get_groups_and_subsamples(items)
        return
    assert scheduler.get_groups_and_subsamples(items) == case["sample_id_groups"]


@pytest.mark.parametrize("case", THD, ids=[c["id"] for c in THD])
def test_thd_partition_golden(case: dict) -> None:
    dtype = getattr(torch, case.get("cu_seqlens_dtype", "int32"))
    bounds = torch.tensor(case["cu_seqlens_padded"], dtype=dtype)
    if "error" in case:
        with pytest.raises(TokenloomError):
            thd_partitioned_indices(
                bounds, case["total_tokens"], case["cp_size"], case.get("cp_rank", 0)
            )
        return
    covered: list[int] = []
    for rank in case["per_rank"]:
        index = thd_partitioned_indices(
            bounds, case["total_tokens"], case["cp_size"], rank["cp_rank"]
        )
        assert index.dtype == torch.int32
        assert index.tolist() == rank["index"]
        covered += index.tolist()
    assert sorted(covered) == list(range(case["total_tokens"]))


def test_golden_files_are_complete() -> None:
    assert (len(BCP), len(DPB), len(THD)) == (316, 317, 41)

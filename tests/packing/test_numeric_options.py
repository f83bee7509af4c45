"""Every numeric option of packing: 0, negative, NaN, floats and bools are refused with a
ConfigError naming the field; huge values mean what they say (no limit)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy
import pytest
import torch
from tests.packing import _cases as cases

from tokenloom.errors import ConfigError
from tokenloom.packing import (
    BalancedCPScheduler,
    CostBalancedScheduler,
    DpBalancedScheduler,
    HybridCPDataLoaderWrapper,
    ProcessGroupCollection,
    SingleRankGroup,
    get_batch_on_this_rank_for_sequence_packing,
    model_costs,
    rank_times,
    wrap_data_iterator,
)

ONE = SingleRankGroup()
PG = ProcessGroupCollection(tp=ONE, cp=ONE, dp=ONE, dp_cp=ONE, pp=ONE)
BAD_COUNTS = [0, -1, float("nan"), 1.5, True, "64", None]
BAD_REALS = [-1.0, float("nan"), float("inf"), True, "1"]


def _config(**changes: Any) -> SimpleNamespace:
    base = {
        "max_seqlen_per_dp_cp_rank": 64,
        "microbatch_group_size_per_vp_stage": 1,
        "virtual_pipeline_model_parallel_size": None,
        "sequence_packing_scheduler": "dp_balanced",
    }
    return SimpleNamespace(**{**base, **changes})


def _items() -> list:
    return cases.random_sequences("single", "dp_balanced", 0, 1)


@pytest.mark.parametrize("value", BAD_COUNTS)
@pytest.mark.parametrize("field", ["max_seqlen_per_dp_cp_rank", "cp_size", "dp_size"])
@pytest.mark.parametrize("scheduler", [DpBalancedScheduler, CostBalancedScheduler])
def test_scheduler_sizes_must_be_positive_ints(scheduler: Any, field: str, value: Any) -> None:
    args = {"max_seqlen_per_dp_cp_rank": 64, "cp_size": 1, "dp_size": 1}
    args[field] = value
    with pytest.raises(ConfigError, match=f"{field} must be a positive int"):
        scheduler(args["max_seqlen_per_dp_cp_rank"], args["cp_size"], args["dp_size"], None)


@pytest.mark.parametrize("value", [0, -1, float("nan"), 1.5, True])
def test_microbatch_group_size_is_none_or_a_positive_int(value: Any) -> None:
    with pytest.raises(ConfigError, match="microbatch_group_size_per_vp_stage must be"):
        DpBalancedScheduler(64, 1, 1, value)
    assert DpBalancedScheduler(64, 1, 1, None).group_multiple == 1


def test_a_huge_limit_means_no_limit_and_numpy_ints_are_ints() -> None:
    lengths = [(i, n) for i, n in enumerate([5, 900, 3, 10**6])]
    huge = DpBalancedScheduler(10**18, 1, 1, None)
    assert huge.get_groups_and_subsamples(lengths) == [[[0, 1, 2, 3]]]
    wide = BalancedCPScheduler(numpy.int64(10**12), 4)
    assert wide.max_seq_len_per_rank == 10**12 and isinstance(wide.max_seq_len_per_rank, int)
    small = [(i, n) for i, n in enumerate([5, 30, 3, 12, 9])]
    assert BalancedCPScheduler(numpy.int64(16), 4).get_groups_and_subsamples(
        small
    ) == BalancedCPScheduler(16, 4).get_groups_and_subsamples(small)


@pytest.mark.parametrize("value", BAD_COUNTS)
def test_balanced_cp_limit_must_be_a_positive_int(value: Any) -> None:
    with pytest.raises(ConfigError, match="max_seqlen_per_dp_cp_rank"):
        BalancedCPScheduler(value, 4)


@pytest.mark.parametrize("value", [0, -1, float("nan"), 1.5, True])
def test_wrap_data_iterator_refuses_a_bad_limit_naming_the_field(value: Any) -> None:
    with pytest.raises(ConfigError, match="max_seqlen_per_dp_cp_rank must be a positive int"):
        wrap_data_iterator(iter(_items()), _config(max_seqlen_per_dp_cp_rank=value), 6, PG)
    with pytest.raises(ConfigError, match="max_seqlen_per_dp_cp_rank"):
        HybridCPDataLoaderWrapper(iter([]), _config(max_seqlen_per_dp_cp_rank=value), PG)


@pytest.mark.parametrize("value", [0, -2, float("nan"), 2.5, True])
def test_virtual_pipeline_size_is_none_or_a_positive_int(value: Any) -> None:
    """Megatron treats anything not > 1 as "no VPP"; 0, negatives and NaN are refused."""
    with pytest.raises(ConfigError, match="virtual_pipeline_model_parallel_size must be"):
        wrap_data_iterator(
            iter(_items()), _config(virtual_pipeline_model_parallel_size=value), 6, PG
        )


def test_virtual_pipeline_size_one_is_no_vpp() -> None:
    items = _items()
    plain = wrap_data_iterator(iter(items), _config(), len(items), PG)
    one = wrap_data_iterator(
        iter(items), _config(virtual_pipeline_model_parallel_size=1), len(items), PG
    )
    assert plain[1:] == one[1:]
    assert [b["tokens"].tolist() for b in plain[0]] == [b["tokens"].tolist() for b in one[0]]


@pytest.mark.parametrize("value", [0, -1, 1.5, True, float("nan")])
def test_num_microbatches_must_be_a_positive_int(value: Any) -> None:
    with pytest.raises(ConfigError, match="num_microbatches must be a positive int"):
        wrap_data_iterator(iter(_items()), _config(), value, PG)


@pytest.mark.parametrize("value", BAD_REALS)
@pytest.mark.parametrize("field", ["token_cost", "attention_cost"])
def test_costs_must_be_finite_and_not_negative(field: str, value: Any) -> None:
    with pytest.raises(ConfigError, match="token_cost|attention_cost"):
        CostBalancedScheduler(64, 1, 1, None, **{field: value})
    with pytest.raises(ConfigError, match="token_cost|attention_cost"):
        rank_times([[[0]]], {0: 4}, **{field: value})
    with pytest.raises(ConfigError, match="not both 0"):
        CostBalancedScheduler(64, 1, 1, None, token_cost=0.0, attention_cost=0.0)


@pytest.mark.parametrize("value", [-1, 1.5, True, float("nan")])
def test_max_rounds_is_an_int_of_zero_or_more(value: Any) -> None:
    with pytest.raises(ConfigError, match="max_rounds must be an int >= 0"):
        CostBalancedScheduler(64, 1, 2, None, max_rounds=value)
    lengths = [(i, n) for i, n in enumerate([30, 2, 17, 9, 40, 5])]
    schedule = CostBalancedScheduler(64, 1, 2, None, max_rounds=0).get_groups_and_subsamples(
        lengths
    )
    assert sorted(i for mb in schedule for ids in mb for i in ids) == list(range(6))


@pytest.mark.parametrize(
    "args",
    [(0, 8, 1e6), (-2, 8, 1e6), (2, 0, 1e6), (2, 8, 0), (2, 8, float("nan")), (2, 8, -1.0)]
    + [(2.5, 8, 1e6), (2, 8, float("inf")), (True, 8, 1e6)],
)
def test_model_costs_refuses_non_positive_or_non_finite_sizes(args: tuple) -> None:
    with pytest.raises(ConfigError, match="num_layers|hidden_size|num_parameters"):
        model_costs(*args)


@pytest.mark.parametrize(
    "vpp_size, vp_stage, match",
    [(0, None, "vpp_size"), (-1, 0, "vpp_size"), (2, 2, "not a stage"), (None, 1, "not a stage")]
    + [(2, -1, "vp_stage"), (2.0, 0, "vpp_size")],
)
def test_get_batch_refuses_a_stage_outside_the_pipeline(vpp_size: Any, vp_stage: Any, match: str):
    packed = {
        "tokens": torch.arange(4),
        "labels": torch.arange(4),
        "loss_mask": torch.ones(4),
        "position_ids": torch.arange(4),
        "cu_seqlens": torch.tensor([0, 4], dtype=torch.int32),
        "cu_seqlens_padded": torch.tensor([0, 4], dtype=torch.int32),
        "max_seqlen": torch.tensor(4, dtype=torch.int32),
    }
    with pytest.raises(ConfigError, match=match):
        get_batch_on_this_rank_for_sequence_packing(
            iter([packed]), vpp_size=vpp_size, vp_stage=vp_stage, pg_collection=PG
        )

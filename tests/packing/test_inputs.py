"""Single-process behaviour and bad input: clear TokenloomErrors, never AssertionError or hangs."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from tests.packing import _cases as cases

from tokenloom.errors import ConfigError, PackingError
from tokenloom.packing import (
    BalancedCPScheduler,
    DpBalancedScheduler,
    HybridCPDataLoaderWrapper,
    PackedSeqParams,
    ProcessGroupCollection,
    SingleRankGroup,
    build_pg_collection,
    get_batch_on_this_rank_for_sequence_packing,
    layout_groups,
    rank_coordinates,
    thd_padding_mask,
    thd_partitioned_indices,
    wrap_data_iterator,
)
from tokenloom.packing._comm import Route

ONE = SingleRankGroup()
PG = ProcessGroupCollection(tp=ONE, cp=ONE, dp=ONE, dp_cp=ONE, pp=ONE)
CONFIG = SimpleNamespace(
    max_seqlen_per_dp_cp_rank=64,
    microbatch_group_size_per_vp_stage=1,
    virtual_pipeline_model_parallel_size=None,
    sequence_packing_scheduler="dp_balanced",
)


def _items() -> list:
    return cases.random_sequences("single", "dp_balanced", 0, 1)


@pytest.mark.parametrize("scheduler", ["dp_balanced", "cost_balanced"])
def test_single_process_pipeline_round_trips_tokens(scheduler: str) -> None:
    config = SimpleNamespace(**{**vars(CONFIG), "sequence_packing_scheduler": scheduler})
    items = _items()
    it, count, total, squares = wrap_data_iterator(iter(items), config, len(items), PG)
    lengths = [int(s["padded_seq_len"][0]) for item in items for s in item]
    assert (total, squares) == (float(sum(lengths)), float(sum(n * n for n in lengths)))
    seen = []
    for _ in range(count):
        tokens, labels, loss_mask, mask, positions, params, padding = (
            get_batch_on_this_rank_for_sequence_packing(it, pg_collection=PG)
        )
        assert mask is None and params.qkv_format == "thd"
        assert tokens is not None and params.cu_seqlens_q_padded is not None
        assert labels is not None and loss_mask is not None and positions is not None
        bounds = params.cu_seqlens_q_padded.tolist()
        assert bounds[-1] == tokens.shape[1] == padding.shape[1]
        seen += [tokens[0, a:b].tolist() for a, b in zip(bounds, bounds[1:])]
    with pytest.raises(StopIteration):
        next(it)
    expected = [[max(t, 0) for t in s["tokens"].tolist()] for item in items for s in item]
    assert sorted(seen) == sorted(expected)


def test_sample_longer_than_the_limit_names_it() -> None:
    with pytest.raises(PackingError, match=r"sample 7 \(position 1\) has 65 tokens"):
        DpBalancedScheduler(32, 2, 1, None).get_groups_and_subsamples([(3, 10), (7, 65)])
    with pytest.raises(PackingError, match="sample 'x' has 129 tokens"):
        BalancedCPScheduler(32, 4).get_groups_and_subsamples([("x", 129)])
    with pytest.raises(PackingError, match="length 0"):
        BalancedCPScheduler(32, 4).get_groups_and_subsamples([(1, 0)])


def test_first_sequence_over_cap_is_an_error_not_an_empty_group() -> None:
    with pytest.raises(PackingError, match="position 0"):
        DpBalancedScheduler(8, 1, 1, None).get_groups_and_subsamples([(0, 9), (1, 3)])


@pytest.mark.parametrize("size", [3, 6, 12, 0])
def test_balanced_cp_needs_a_power_of_two(size: int) -> None:
    with pytest.raises(ConfigError, match="power of two"):
        BalancedCPScheduler(16, size)


def test_balanced_cp_accepts_an_int_or_anything_with_size() -> None:
    items = [(0, 30), (1, 10), (2, 10), (3, 5)]
    by_int = BalancedCPScheduler(16, 4).get_groups_and_subsamples(items)
    by_object = BalancedCPScheduler(16, SimpleNamespace(size=lambda: 4)).get_groups_and_subsamples(
        items
    )
    assert by_int == by_object
    with pytest.raises(ConfigError):
        BalancedCPScheduler(16, "four")


def test_batch_missing_a_required_key() -> None:
    items = _items()
    del items[2][0]["loss_mask"]
    with pytest.raises(PackingError, match=r"missing the required key\(s\) \['loss_mask'\]"):
        wrap_data_iterator(iter(items), CONFIG, len(items), PG)
    with pytest.raises(PackingError, match="lacks the key"):
        get_batch_on_this_rank_for_sequence_packing(iter([{"cu_seqlens": 1}]), pg_collection=PG)
    wrapper = HybridCPDataLoaderWrapper(
        iter([[{"tokens": torch.arange(4)}]]), SimpleNamespace(max_seqlen_per_dp_cp_rank=8), PG
    )
    with pytest.raises(PackingError, match="no 'cu_seqlens'"):
        next(wrapper)


def test_mismatched_group_sizes() -> None:
    with pytest.raises(PackingError, match="has 2 rank lists"):
        Route([[[0], [1]]], [0, 2], ONE, ONE)
    two = SimpleNamespace(size=lambda: 2, rank=lambda: 0)
    three = SimpleNamespace(size=lambda: 3, rank=lambda: 0)
    pg = ProcessGroupCollection(tp=ONE, cp=ONE, dp=two, dp_cp=three, pp=ONE)
    with pytest.raises(ConfigError, match="not a multiple of the DP group"):
        wrap_data_iterator(iter([]), CONFIG, 1, pg)
    with pytest.raises(ConfigError, match="not divisible"):
        layout_groups(6, 4, 1, 1)


def test_other_bad_inputs() -> None:
    with pytest.raises(ConfigError, match="pg_collection is required"):
        wrap_data_iterator(iter([]), CONFIG, 1)
    with pytest.raises(ConfigError, match="not one of"):
        wrap_data_iterator(
            iter([]), SimpleNamespace(**{**vars(CONFIG), "sequence_packing_scheduler": "x"}), 1, PG
        )
    with pytest.raises(PackingError, match="ended after 2 of 9"):
        wrap_data_iterator(iter(_items()[:2]), CONFIG, 9, PG)
    with pytest.raises(ConfigError, match="needs a data iterator"):
        wrap_data_iterator(None, CONFIG, 1, PG)
    with pytest.raises(ConfigError, match="positive int"):
        DpBalancedScheduler(0, 1, 1, None)
    with pytest.raises(ConfigError, match="list of 2"):
        wrap_data_iterator(
            iter([]),
            SimpleNamespace(**{**vars(CONFIG), "virtual_pipeline_model_parallel_size": 2}),
            1,
            PG,
        )


def test_thd_sequence_not_divisible_by_two_cp() -> None:
    with pytest.raises(PackingError, match="sequence 1 has padded length 6"):
        thd_partitioned_indices(torch.tensor([0, 8, 14, 24], dtype=torch.int32), 24, 2, 0)


def test_padding_mask_marks_padded_slots() -> None:
    mask = thd_padding_mask(
        torch.tensor([0, 3, 5], dtype=torch.int32), torch.tensor([0, 4, 8], dtype=torch.int32)
    )
    assert mask.tolist() == [False] * 3 + [True] + [False] * 2 + [True] * 2


def test_packed_seq_params_seq_idx() -> None:
    params = PackedSeqParams(
        qkv_format="thd", cu_seqlens_q=torch.tensor([0, 5, 7, 11]), total_tokens=16
    )
    assert params.seq_idx is not None
    assert params.seq_idx.tolist() == [[0] * 5 + [1] * 2 + [2] * 4 + [3] * 5]
    assert PackedSeqParams().seq_idx is None


def test_layout_is_megatron_default_order() -> None:
    groups = layout_groups(16, 2, 2, 2)
    assert groups["tp"][0] == (0, 1) and groups["cp"][0] == (0, 2)
    assert groups["dp"][0] == (0, 4) and groups["dp_cp"][0] == (0, 2, 4, 6)
    assert groups["pp"][0] == (0, 8)
    assert rank_coordinates(13, 16, 2, 2, 2) == rank_coordinates(13, 16, 2, 2, 2)
    c = rank_coordinates(13, 16, 2, 2, 2)
    assert (c.tp, c.cp, c.dp, c.pp) == (1, 0, 1, 1)
    for kind in groups:
        assert sorted(r for g in groups[kind] for r in g) == list(range(16))


def test_build_pg_collection_without_distributed() -> None:
    pg = build_pg_collection()
    assert all(getattr(pg, k).size() == 1 for k in ("tp", "cp", "dp", "dp_cp", "pp"))
    with pytest.raises(ConfigError, match="init_process_group"):
        build_pg_collection(4, 2)


def test_hybrid_cp_wrapper_calls_megatrons_step_methods_that_a_subclass_overrides() -> None:
    """megatron-core's ``__next__`` calls get_global_seqlens, get_global_id_seqlens,
    unpack_batch and reroute_samples_to_hdp_ranks on ``self``; so does tokenloom's."""
    calls = []

    class Recording(HybridCPDataLoaderWrapper):
        def get_global_seqlens(self, subsample_seqlens):
            calls.append(("seqlens", subsample_seqlens.tolist()))
            return super().get_global_seqlens(subsample_seqlens)

        def get_global_id_seqlens(self, num_local_subsamples, offsets, seqlens_gathered):
            calls.append(("ids", num_local_subsamples, offsets.tolist(), seqlens_gathered))
            return super().get_global_id_seqlens(num_local_subsamples, offsets, seqlens_gathered)

        def unpack_batch(self, batch):
            pieces = super().unpack_batch(batch)
            calls.append(("unpack", [len(p["tokens"]) for p in pieces]))
            return pieces

        def reroute_samples_to_hdp_ranks(self, batch, ids, id_seqlens, groups, offsets):
            calls.append(("reroute", ids.tolist()))
            return super().reroute_samples_to_hdp_ranks(batch, ids, id_seqlens, groups, offsets)

    packed = {"tokens": torch.arange(10), "cu_seqlens": torch.tensor([0, 3, 3, 10])}
    wrapper = Recording(iter([[packed]]), SimpleNamespace(max_seqlen_per_dp_cp_rank=16), PG)
    samples, groups = next(wrapper)
    assert calls == [
        ("seqlens", [3, 7]),
        ("ids", 2, [0], [3, 7]),
        ("unpack", [3, 7]),
        ("reroute", [0, 1]),
    ]
    assert sorted(samples) == [0, 1] and samples[1]["tokens"].tolist() == list(range(3, 10))
    assert sum(len(ids) for microbatch in groups for ids in microbatch) == 2

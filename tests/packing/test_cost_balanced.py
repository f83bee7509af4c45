"""CostBalancedScheduler: structural invariants (hypothesis) and the balance it reaches."""

from __future__ import annotations

import numpy
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenloom.errors import PackingError
from tokenloom.packing import (
    BalancedCPScheduler,
    CostBalancedScheduler,
    DpBalancedScheduler,
    imbalance,
    model_costs,
    rank_times,
)


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_schedule_is_valid(data: st.DataObject) -> None:
    cp, dp = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 8))
    group = data.draw(st.one_of(st.none(), st.integers(1, 3)))
    limit = data.draw(st.integers(4, 64))
    cap = limit * cp
    lengths = data.draw(st.lists(st.integers(1, cap), max_size=120))
    scheduler = CostBalancedScheduler(limit, cp, dp, group)
    items = [(1000 + i, n) for i, n in enumerate(lengths)]
    try:
        schedule = scheduler.get_groups_and_subsamples(items)
    except PackingError:
        assert 0 < len(lengths) < dp * (group or 1) * 2 or sum(lengths) > len(lengths) * cap / 2
        return
    if not lengths:
        assert schedule == []
        return
    assert len(schedule) % (group or 1) == 0
    placed = []
    for microbatch in schedule:
        assert len(microbatch) == dp * cp
        for d in range(dp):
            ids = microbatch[d * cp]
            assert ids and all(microbatch[d * cp + c] == ids for c in range(cp))
            assert sum(lengths[i] for i in ids) <= cap
            placed += ids
    assert sorted(placed) == list(range(len(lengths)))


def _lognormal(seed: int, n: int, cap: int) -> list[int]:
    rng = numpy.random.default_rng(seed)
    return numpy.clip(rng.lognormal(numpy.log(1024), 1.0, n), 16, cap).astype(int).tolist()


@pytest.mark.parametrize("seed", range(6))
def test_balances_lognormal_batches_and_beats_megatron(seed: int) -> None:
    limit, cp, dp = 8192, 2, 8
    lengths = _lognormal(seed, 256, limit * cp)
    items = list(enumerate(lengths))
    by_id = dict(items)
    cost = imbalance(
        rank_times(
            CostBalancedScheduler(limit, cp, dp, None).get_groups_and_subsamples(items), by_id
        )
    )
    dpb = imbalance(
        rank_times(DpBalancedScheduler(limit, cp, dp, None).get_groups_and_subsamples(items), by_id)
    )
    _, groups = BalancedCPScheduler(limit, cp * dp).get_groups_and_subsamples(items)
    bcp = imbalance(rank_times(groups, by_id))
    assert cost <= 1.05
    assert cost <= dpb and cost <= bcp


def test_constants_change_the_schedule() -> None:
    items = list(enumerate([4096, 64, 64, 64, 64, 64, 64, 1024, 1024, 1024, 1024, 2048]))
    linear = CostBalancedScheduler(8192, 1, 2, None, token_cost=1.0, attention_cost=0.0)
    square = CostBalancedScheduler(8192, 1, 2, None, token_cost=0.0, attention_cost=1.0)
    assert linear.get_groups_and_subsamples(items) != square.get_groups_and_subsamples(items)
    assert model_costs(32, 4096, 8e9) == (48e9, 6.0 * 32 * 4096)

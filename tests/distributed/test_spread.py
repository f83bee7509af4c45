"""``partition``: longest processing time first, deterministic and within Graham's bound.

``build_in_shares`` runs on real gloo groups in tests/builder/test_cold_build.py.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenloom.distributed.spread import partition
from tokenloom.errors import DistributedError

costs_lists = st.lists(st.floats(min_value=1.0, max_value=1e9), min_size=0, max_size=60)


@settings(max_examples=200, deadline=None)
@given(costs=costs_lists, world=st.integers(1, 17))
def test_every_job_has_one_owner_and_the_share_is_within_the_list_bound(costs, world):
    shares = partition(costs, world)
    assert sorted(j for r in range(world) for j in shares.jobs_of(r)) == list(range(len(costs)))
    assert sum(shares.loads()) == pytest.approx(sum(costs))
    bound = sum(costs) / world + (1 - 1 / world) * max(costs, default=0.0)
    assert shares.critical_path() <= bound * (1 + 1e-9)
    assert partition(costs, world).owners == shares.owners  # deterministic


@settings(max_examples=150, deadline=None)
@given(
    costs=st.lists(st.integers(1, 100), min_size=1, max_size=7),
    world=st.integers(1, 3),
)
def test_the_largest_share_is_within_4_3_of_the_optimum(costs, world):
    best = min(
        max(sum(c for c, o in zip(costs, owners) if o == r) for r in range(world))
        for owners in itertools.product(range(world), repeat=len(costs))
    )
    assert partition(costs, world).critical_path() <= (4 / 3 - 1 / (3 * world)) * best + 1e-9


def test_largest_first_to_the_least_loaded_rank():
    shares = partition([5, 1, 7, 3, 3], 2)
    assert shares.owners == [1, 1, 0, 1, 0]  # 7 -> r0, 5 -> r1, 3 -> r1, 3 -> r0, 1 -> r1
    assert shares.loads() == [10.0, 9.0]
    assert partition([1.0] * 3, 8).jobs_of(7) == []  # more ranks than jobs: idle ranks


def test_no_rank_is_refused():
    with pytest.raises(DistributedError, match="at least 1 rank"):
        partition([1.0], 0)

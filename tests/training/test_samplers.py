"""Sampler properties beyond the golden cases: elastic order, errors, RandomSeedDataset."""

from __future__ import annotations

import pickle
import random
from typing import Any

import numpy
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenloom.errors import ConfigError
from tokenloom.training import (
    ElasticPretrainingSampler,
    MegatronPretrainingRandomSampler,
    MegatronPretrainingSampler,
    RandomSeedDataset,
)


def global_batches(total: int, mbs: int, gbs: int, dp: int, consumed: int, steps: int) -> list:
    """The sets of samples of ``steps`` global batches seen by all ranks together."""
    ranks = [
        iter(ElasticPretrainingSampler(total, consumed, mbs, gbs, r, dp, seed=3)) for r in range(dp)
    ]
    result = []
    for _ in range(steps):
        chunk = []
        for _ in range(gbs // (mbs * dp)):
            for it in ranks:
                chunk.extend(next(it))
        result.append(sorted(chunk))
    return result


@settings(max_examples=25, deadline=None)
@given(total=st.integers(16, 200), consumed_batches=st.integers(0, 3))
@pytest.mark.processes
def test_elastic_global_batches_do_not_depend_on_dp(total: int, consumed_batches: int) -> None:
    gbs = 16
    consumed = consumed_batches * gbs % (total // gbs * gbs)
    steps = max(1, (total // gbs) - consumed // gbs)
    reference = global_batches(total, 1, gbs, 1, consumed, steps)
    for mbs, dp in ((2, 2), (1, 4), (4, 4), (2, 8)):
        assert global_batches(total, mbs, gbs, dp, consumed, steps) == reference


def test_elastic_epochs_are_permutations() -> None:
    sampler = ElasticPretrainingSampler(37, 0, 2, 8, 0, 1, seed=5)
    first, second = sum(list(sampler), []), sum(list(sampler), [])
    assert sampler.epoch == 1 and sampler.consumed_samples == 64
    assert len(set(first)) == 32 and len(set(second)) == 32 and first != second


def test_megatron_sharded_order_depends_on_dp() -> None:
    """The documented Megatron behaviour the elastic mode fixes."""

    def first_step(dp: int) -> list:
        return sorted(
            sum(
                (
                    next(iter(MegatronPretrainingRandomSampler(None, 64, 0, 16 // dp, r, dp, True)))
                    for r in range(dp)
                ),
                [],
            )
        )

    assert first_step(2) != first_step(4)


@pytest.mark.parametrize(
    "kwargs, word",
    [
        (dict(micro_batch_size=0), "micro_batch_size"),
        (dict(data_parallel_rank=2), "data_parallel_rank"),
        (dict(consumed_samples=10), "consumed_samples"),
        (dict(total_samples=0), "total_samples"),
        (dict(data_parallel_size=0), "data_parallel_size"),
        (dict(micro_batch_size=True), "micro_batch_size"),
    ],
)
def test_errors_name_the_argument(kwargs: dict, word: str) -> None:
    args: dict[str, Any] = dict(
        total_samples=10,
        consumed_samples=0,
        micro_batch_size=1,
        data_parallel_rank=0,
        data_parallel_size=2,
    )
    args.update(kwargs)
    with pytest.raises(ConfigError, match=word):
        MegatronPretrainingSampler(**args)


def test_elastic_errors() -> None:
    with pytest.raises(ConfigError, match="global_batch_size"):
        ElasticPretrainingSampler(100, 0, 2, 6, 0, 2)
    with pytest.raises(ConfigError, match="global_batch_size"):
        ElasticPretrainingSampler(10, 0, 2, 16, 0, 2)
    with pytest.raises(ConfigError, match="multiple"):
        ElasticPretrainingSampler(100, 6, 2, 16, 0, 2)


def test_random_sampler_pickles_without_its_permutation() -> None:
    sampler = MegatronPretrainingRandomSampler(None, 100_000, 0, 4, 0, 2, False)
    next(iter(sampler))
    assert len(pickle.dumps(sampler)) < 2000
    copy = pickle.loads(pickle.dumps(sampler))
    assert (
        list(copy)[0] == list(MegatronPretrainingRandomSampler(None, 100_000, 8, 4, 0, 2, False))[0]
    )


class Noisy:
    """A dataset whose samples are random draws (as augmentation would make)."""

    def __len__(self) -> int:
        return 50

    def __getitem__(self, idx: int) -> dict:
        return {"draw": (random.random(), float(numpy.random.rand()))}


def test_random_seed_dataset_seeds_per_sample_and_epoch() -> None:
    data = RandomSeedDataset(Noisy(), 7)
    a = data[3]
    assert data[3] == a
    data.set_epoch(1)
    assert data[3] != a and data[2] == RandomSeedDataset(Noisy(), 8)[2]
    assert len(data) == 50 and pickle.loads(pickle.dumps(data))[2] == data[2]

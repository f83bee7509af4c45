"""Every numeric (and flag) argument of the loader and the samplers: 0, negative, NaN and
huge values are either meaningful (and documented in docs/training.md) or one ConfigError
naming the argument."""

from __future__ import annotations

import math
import random
from typing import Any

import numpy
import pytest
from tests.training._data import IndexDataset, NoisyDataset, seen

from tokenloom.errors import ConfigError
from tokenloom.training import (
    ElasticPretrainingSampler,
    HybridCPMegatronPretrainingSampler,
    MegatronPretrainingRandomSampler,
    MegatronPretrainingSampler,
    RandomSeedDataset,
    build_pretraining_data_loader,
    randperm,
)

torch = pytest.importorskip("torch")

NAN, INF = math.nan, math.inf
BASE: dict[str, Any] = dict(dataloader_type="cyclic", micro_batch_size=2, data_parallel_size=2)
REFUSED: list[tuple[str, Any]] = [
    *[("micro_batch_size", v) for v in (0, -1, NAN, 2**63, True, 2.0, "2")],
    *[("data_parallel_size", v) for v in (0, -2, NAN, 2**64)],
    *[("data_parallel_rank", v) for v in (-1, NAN, 2)],  # 2 with data_parallel_size=2
    *[("consumed_samples", v) for v in (-1, NAN, 2**63, 4.0)],
    *[("global_batch_size", v) for v in (0, -8, NAN, 2**63)],  # Megatron asserts > 0
    *[("num_workers", v) for v in (-1, NAN, 1.0, 10**6)],
    *[("prefetch_factor", v) for v in (0, -1, NAN, 10**9)],
    *[("timeout", v) for v in (-1, NAN, INF, 1e300, True, "5")],
    *[("seed", v) for v in (-1, NAN, 2**63, 1.5)],
    ("data_sharding", "no"),
    ("drop_last", NAN),
    ("hybrid_context_parallel", 1),
    ("full_validation", "yes"),
    ("return_cu_seqlens", 0),
    ("pin_memory", "no"),
    ("persistent_workers", 2),
    ("create_attention_mask", "x"),
    ("dataloader_type", 3),
    ("multiprocessing_context", 5),
    ("worker_init_fn", 5),
]


@pytest.mark.parametrize("name, value", REFUSED, ids=[f"{n}={v!r}"[:40] for n, v in REFUSED])
def test_a_bad_loader_argument_is_one_error_naming_it(name: str, value: Any) -> None:
    kwargs = dict(BASE, **{"num_workers": 1, name: value})
    consumed = kwargs.pop("consumed_samples", 0)
    with pytest.raises(ConfigError, match=name):
        build_pretraining_data_loader(IndexDataset(30), consumed, **kwargs)


def batches(loader: Any, count: int = 4) -> list:
    iterator = iter(loader)
    return [seen(next(iterator)) for _ in range(count)]


@pytest.mark.processes
def test_meaningful_edges_are_accepted() -> None:
    data = IndexDataset(30)
    reference = batches(build_pretraining_data_loader(data, 0, **BASE))
    same = [
        dict(timeout=0),  # wait forever (torch's and Megatron's default)
        dict(timeout=5.0, prefetch_factor=4),  # without workers both are ignored
        dict(micro_batch_size=numpy.int64(2), data_parallel_size=numpy.int32(2)),
        dict(seed=2**63 - 1, global_batch_size=None, data_sharding=numpy.bool_(True)),
        dict(num_workers=1, prefetch_factor=1, timeout=120, multiprocessing_context="fork"),
    ]
    for extra in same:
        assert batches(build_pretraining_data_loader(data, 0, **dict(BASE, **extra)))
        assert batches(build_pretraining_data_loader(data, 0, **dict(BASE, **extra))) == reference
    # consumed_samples past an epoch: Megatron's next epoch (28 active samples per epoch)
    later = build_pretraining_data_loader(data, 10 * 28, **BASE)
    assert later.batch_sampler.epoch == 10 and len(batches(later)) == 4
    # a micro-batch larger than the data: Megatron's single sampler yields nothing
    assert list(build_pretraining_data_loader(data, 0, micro_batch_size=31)) == []


def test_elastic_seed_is_taken_mod_2_32_like_torchs_generator() -> None:
    kwargs = dict(dataloader_type="elastic", micro_batch_size=2, global_batch_size=8)
    data = IndexDataset(40)
    big = batches(build_pretraining_data_loader(data, 0, seed=2**63 - 1, **kwargs))
    small = batches(build_pretraining_data_loader(data, 0, seed=(2**63 - 1) % 2**32, **kwargs))
    assert big == small


@pytest.mark.parametrize("seed", [-5, 0, 7, 2**32 + 7, 2**64 + 7, -(2**70)])
def test_random_seed_dataset_takes_any_integer_seed(seed: int) -> None:
    """Megatron's seeds where Megatron runs; torch mod 2**64, numpy mod 2**32 elsewhere."""
    data = RandomSeedDataset(NoisyDataset(8), seed=seed)
    data.set_epoch(2)
    sample_seed = 3 + seed + 2
    tokens = data[3]["tokens"].tolist()
    after_random, after_numpy = random.random(), numpy.random.random()
    torch.manual_seed(sample_seed % 2**64)
    assert tokens == torch.randint(0, 1000, (4,)).tolist()
    random.seed(sample_seed)
    assert after_random == random.random()
    assert after_numpy == numpy.random.RandomState(sample_seed % 2**32).random_sample()
    if -(2**63) <= sample_seed < 2**64:  # where Megatron's torch.manual_seed(seed) runs
        torch.manual_seed(sample_seed)
        assert tokens == torch.randint(0, 1000, (4,)).tolist()


@pytest.mark.parametrize(
    "call, word",
    [
        (lambda: RandomSeedDataset(NoisyDataset(4), seed=NAN), "seed"),
        (lambda: RandomSeedDataset(NoisyDataset(4), seed=1.0), "seed"),
        (lambda: RandomSeedDataset(NoisyDataset(4), seed=0).set_epoch(-1), "epoch"),
        (lambda: RandomSeedDataset(NoisyDataset(4), seed=0).set_epoch("x"), "epoch"),
        (lambda: MegatronPretrainingSampler(2**63, 0, 2, 0, 1), "total_samples"),
        (lambda: MegatronPretrainingSampler(30, 0, 2, 0, 2**63), "data_parallel_size"),
        (lambda: MegatronPretrainingRandomSampler(None, 30, 2**63, 2, 0, 1, True), "consumed"),
        (lambda: HybridCPMegatronPretrainingSampler(30, 0, 2, -8, 0, 1), "global_batch_size"),
        (lambda: ElasticPretrainingSampler(30, 0, 2, 8, 0, 1, seed=-1), "seed"),
        (lambda: next(iter(ElasticPretrainingSampler(2**62, 0, 2, 8, 0, 1))), "GiB"),
        (lambda: randperm(2**62, 0), "GiB"),
        (lambda: randperm(NAN, 0), "randperm n"),  # type: ignore[arg-type]
    ],
)
def test_a_bad_sampler_argument_is_one_error_naming_it(call: Any, word: str) -> None:
    with pytest.raises(ConfigError, match=word):
        call()


def test_huge_but_real_counts_work_without_building_huge_lists() -> None:
    total = 2**62
    sampler = MegatronPretrainingSampler(total, total - 8, 2, 1, 2)
    # iter(): list(sampler) would preallocate len(sampler) = total_samples (Megatron's __len__)
    assert list(iter(sampler)) == [[total - 6, total - 5], [total - 2, total - 1]]
    hybrid = HybridCPMegatronPretrainingSampler(30, 0, 2, 0, 0, 1)  # Megatron: nothing fits
    assert list(hybrid) == []

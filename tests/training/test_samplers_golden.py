"""Every sampler case of samplers.json: the same index lists, ConfigError where Megatron fails."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from tests.training._golden import cases

from tokenloom.errors import ConfigError, TokenloomError
from tokenloom.training import (
    HybridCPMegatronPretrainingSampler,
    MegatronFullValidationSampler,
    MegatronPretrainingRandomSampler,
    MegatronPretrainingSampler,
)

BUILDERS: dict = {
    "MegatronPretrainingSampler": MegatronPretrainingSampler,
    "HybridCPMegatronPretrainingSampler": HybridCPMegatronPretrainingSampler,
    "MegatronFullValidationSampler": MegatronFullValidationSampler,
}


def _ids(case: Any) -> str:
    return case["id"] if isinstance(case, dict) else "missing"


def _expect_error(record: dict, call: Callable[[], Any]) -> None:
    with pytest.raises(ConfigError) as info:
        call()
    assert isinstance(info.value, ValueError) and isinstance(info.value, TokenloomError)
    assert not isinstance(info.value, (AssertionError, ZeroDivisionError))
    assert str(info.value), record


@pytest.mark.parametrize("case", [c for name in BUILDERS for c in cases(name)], ids=_ids)
def test_sequential_samplers(case: dict) -> None:
    cls = BUILDERS[case["sampler"]]
    dp = case["data_parallel_size"]
    for record in case["per_rank"]:

        def build(record: dict = record) -> Any:
            return cls(**case["args"], data_parallel_rank=record["rank"], data_parallel_size=dp)

        if "error" in record:
            _expect_error(record, lambda: list(build()))
            continue
        sampler = build()
        assert len(sampler) == record["len"]
        assert list(sampler) == record["batches"]


@pytest.mark.parametrize("case", cases("MegatronPretrainingRandomSampler"), ids=_ids)
def test_random_sampler_three_passes(case: dict) -> None:
    dp = case["data_parallel_size"]
    for record in case["per_rank"]:

        def build(record: dict = record) -> MegatronPretrainingRandomSampler:
            return MegatronPretrainingRandomSampler(
                None, **case["args"], data_parallel_rank=record["rank"], data_parallel_size=dp
            )

        if "error" in record:
            assert record.get("pass_index", 0) == 0 and not record["passes"]
            _expect_error(record, lambda: list(build()))
            continue
        sampler = build()
        assert len(sampler) == record["len"]
        for expected in record["passes"]:
            assert sampler.consumed_samples == expected["consumed_samples_before"]
            assert list(sampler) == expected["batches"]
            assert sampler.epoch == expected["epoch"]
            assert sampler.consumed_samples == expected["consumed_samples_after"]

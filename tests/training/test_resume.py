"""Exact resume (every kind, with workers, across epochs), elastic resume, bad states."""

from __future__ import annotations

import pickle
from typing import Any

import pytest
from tests.training._data import IndexDataset, NoisyDataset, seen

from tokenloom.errors import ConfigError
from tokenloom.training import RandomSeedDataset, build_pretraining_data_loader

torch = pytest.importorskip("torch")

KINDS: dict[str, dict[str, Any]] = {
    "single": dict(dataloader_type="single"),
    "single-hybrid": dict(
        dataloader_type="single", hybrid_context_parallel=True, global_batch_size=8
    ),
    "cyclic-sharded": dict(dataloader_type="cyclic", data_sharding=True),
    "cyclic-unsharded": dict(dataloader_type="cyclic", data_sharding=False),
    # mbs 1, dp 4, 30 samples: rank 0 yields 8 batches (32 samples) per 28-sample epoch,
    # so Megatron's consumed_samples drifts into the next epoch
    "cyclic-unsharded-drift": dict(
        dataloader_type="cyclic",
        data_sharding=False,
        micro_batch_size=1,
        data_parallel_rank=0,
        data_parallel_size=4,
    ),
    "elastic": dict(dataloader_type="elastic", global_batch_size=8, seed=11),
}


def make(data: Any, kind: str, workers: int = 0, rank: int = 1, dp: int = 2, **extra: Any) -> Any:
    kwargs = dict(
        dict(micro_batch_size=2, data_parallel_rank=rank, data_parallel_size=dp),
        **KINDS[kind],
        num_workers=workers,
        **extra,
    )
    return build_pretraining_data_loader(data, 0, **kwargs)


def indices(batch: Any) -> list:
    if isinstance(batch, list):  # hybrid CP: one dict per sample
        return [int(sample["tokens"][0]) for sample in batch]
    return seen(batch)


def take(iterator: Any, count: int) -> list[list]:
    out = []
    for _ in range(count):
        try:
            out.append(indices(next(iterator)))
        except StopIteration:
            break
    return out


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("stop", [1, 4, 7])
def test_exact_resume_in_process(kind: str, stop: int) -> None:
    data = IndexDataset(30)  # 30 % (2*2) != 0: the unsharded sampler drifts across epochs
    continuous = take(iter(make(data, kind)), 20)
    first = make(data, kind)
    iterator = iter(first)
    head = take(iterator, stop)
    state = pickle.loads(pickle.dumps(first.state_dict()))
    second = make(data, kind)
    second.load_state_dict(state)
    assert head + take(iter(second), 20 - stop) == continuous


@pytest.mark.timeout(180)
@pytest.mark.parametrize("kind", ["cyclic-unsharded-drift", "elastic"])
@pytest.mark.processes
def test_exact_resume_with_live_workers_across_epochs(kind: str) -> None:
    data = IndexDataset(30)
    continuous = take(iter(make(data, kind)), 24)
    first = make(data, kind, workers=2, multiprocessing_context="fork")
    iterator = iter(first)
    head = take(iterator, 9)  # the workers have already prefetched batches 10..13
    state = pickle.loads(pickle.dumps(first.state_dict()))
    assert state["consumed_samples"] == 9 * 4
    del iterator, first
    second = make(data, kind, workers=2, multiprocessing_context="fork")
    second.load_state_dict(state)
    assert head + take(iter(second), 15) == continuous


def test_megatron_consumed_samples_still_resumes(tmp_path: Any) -> None:
    """A Megatron checkpoint's consumed_samples gives Megatron's next batches."""
    data = IndexDataset(64)
    kind = dict(
        KINDS["cyclic-sharded"], micro_batch_size=2, data_parallel_rank=1, data_parallel_size=2
    )
    continuous = take(iter(build_pretraining_data_loader(data, 0, **kind)), 12)
    resumed = take(iter(build_pretraining_data_loader(data, 20, **kind)), 7)
    assert resumed == continuous[5:12]


@pytest.mark.parametrize("new_dp", [1, 4])
def test_elastic_resume_at_another_dp(new_dp: int) -> None:
    data = IndexDataset(40)

    def global_batches(loaders: list, count: int) -> list:
        its = [iter(loader) for loader in loaders]
        steps = 8 // (2 * len(loaders))
        return [
            sorted(sum((indices(next(it)) for _ in range(steps) for it in its), []))
            for _ in range(count)
        ]

    old = [make(data, "elastic", rank=r, dp=2) for r in range(2)]
    continuous = global_batches([make(data, "elastic", rank=r, dp=2) for r in range(2)], 9)
    head = global_batches(old, 3)
    states = [loader.state_dict() for loader in old]
    new = [make(data, "elastic", rank=r, dp=new_dp) for r in range(new_dp)]
    for loader in new:
        loader.load_state_dict(states[0])
    assert head + global_batches(new, 6) == continuous


def test_bad_states_are_config_errors() -> None:
    data = IndexDataset(30)
    state = make(data, "cyclic-sharded").state_dict()
    with pytest.raises(ConfigError, match="another dataset"):
        make(IndexDataset(31), "cyclic-sharded").load_state_dict(state)
    with pytest.raises(ConfigError, match="data_parallel_size"):
        make(data, "cyclic-sharded", rank=0, dp=1).load_state_dict(state)
    with pytest.raises(ConfigError, match="data_sharding"):
        make(data, "cyclic-unsharded").load_state_dict(state)
    with pytest.raises(ConfigError, match="dict"):
        make(data, "cyclic-sharded").load_state_dict([1, 2])  # type: ignore[arg-type,unused-ignore]
    with pytest.raises(ConfigError, match="not a state"):
        make(data, "cyclic-sharded").load_state_dict({})
    single = make(data, "single").state_dict()
    single.update(consumed_samples=40, pass_start_consumed=40)
    with pytest.raises(ConfigError, match="past the end"):
        make(data, "single").load_state_dict(single)


def test_stale_iterator_is_refused() -> None:
    loader = make(IndexDataset(30), "cyclic-sharded")
    iterator = iter(loader)
    next(iterator)
    loader.load_state_dict(loader.state_dict())
    with pytest.raises(ConfigError, match="stale"):
        next(iterator)


@pytest.mark.timeout(180)
@pytest.mark.processes
def test_random_seed_dataset_epoch_reaches_workers() -> None:
    """Megatron's workers keep epoch 0's seeds; here every epoch reseeds in the worker."""
    data = RandomSeedDataset(NoisyDataset(8), seed=100)

    def run(workers: int) -> list:
        loader = build_pretraining_data_loader(
            data,
            0,
            dataloader_type="cyclic",
            micro_batch_size=2,
            num_workers=workers,
            multiprocessing_context="fork" if workers else None,
        )
        iterator = iter(loader)
        return [(loader.batch_sampler.epoch, next(iterator)["tokens"].tolist()) for _ in range(12)]

    main, workers = run(0), run(2)
    assert [tokens for _, tokens in main] == [tokens for _, tokens in workers]
    sampler = build_pretraining_data_loader(
        data, 0, dataloader_type="cyclic", micro_batch_size=2
    ).batch_sampler
    order = [b for _ in range(3) for b in sampler]
    for step, (_, tokens) in enumerate(workers):
        epoch = step // 4
        for index, row in zip(order[step], tokens):
            torch.manual_seed(index + 100 + epoch)
            assert row == torch.randint(0, 1000, (4,)).tolist()


@pytest.mark.parametrize("kind", ["single", "single-hybrid"])
def test_a_state_after_the_last_partial_batch_loads_at_the_end(kind: str) -> None:
    """drop_last=False: the partial batch hands out fewer than a step; consumed_samples
    stops at len(dataset) and the state loads (it used to overshoot and be refused)."""
    data = IndexDataset(30)
    count = len(take(iter(make(data, kind, drop_last=False)), 20))
    first = make(data, kind, drop_last=False)
    head = take(iter(first), count)  # the last one is partial; the pass has not ended yet
    assert first.consumed_samples == 30 and len(head[-1]) < len(head[0])
    second = make(data, kind, drop_last=False)
    second.load_state_dict(first.state_dict())
    assert second.consumed_samples == 30 and list(second) == []

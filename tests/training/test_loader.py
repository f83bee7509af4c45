"""The loader on real GPT/blended datasets: Megatron's dtypes, get_batch path, workers."""

from __future__ import annotations

import pickle
import warnings
from pathlib import Path
from typing import Any

import numpy
import pytest
from tests.training._data import EOD, build_train, write_corpus

from tokenloom.errors import ConfigError
from tokenloom.training import (
    MegatronPretrainingRandomSampler,
    MegatronPretrainingSampler,
    build_pretraining_data_loader,
)

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def corpora(tmp_path_factory: pytest.TempPathFactory) -> tuple:
    root = tmp_path_factory.mktemp("loader")
    return (write_corpus(root / "a", 400, 1), write_corpus(root / "b", 300, 2), root)


@pytest.fixture(scope="module")
def blend(corpora: tuple) -> Any:
    a, b, root = corpora
    return build_train([a, b], root / "cache", 3000, weights=[0.7, 0.3])


def expected(dataset: Any, indices: list, mask: bool) -> dict:
    rows = [dataset[i] for i in indices]
    names = ["tokens", "labels", "loss_mask", "position_ids"] + (["attention_mask"] if mask else [])
    return {name: numpy.stack([numpy.asarray(r[name]) for r in rows]) for name in names}


@pytest.mark.parametrize("mask", [True, False])
def test_batches_are_megatrons(corpora: tuple, mask: bool) -> None:
    a, b, root = corpora
    dataset = build_train(
        [a, b], root / "cache", 200, weights=[0.5, 0.5], create_attention_mask=mask
    )
    loader = build_pretraining_data_loader(
        dataset, 8, micro_batch_size=4, data_parallel_rank=1, data_parallel_size=2
    )
    sampler = MegatronPretrainingSampler(len(dataset), 8, 4, 1, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "NumPy array is not writable" or pin warnings
        pairs = list(zip(loader, sampler))
    assert len(pairs) == (len(dataset) - 8) // 8
    dtypes = {
        "tokens": torch.int64,
        "labels": torch.int64,
        "loss_mask": torch.float32,
        "position_ids": torch.int64,
        "attention_mask": torch.bool,
        "dataset_id": torch.int16,
    }
    for batch, indices in pairs[:12]:
        want = expected(dataset, indices, mask)
        assert set(batch) == set(want) | {"dataset_id"}
        for name, value in want.items():
            assert batch[name].dtype == dtypes[name]
            numpy.testing.assert_array_equal(batch[name].numpy(), value, err_msg=name)
        if mask:
            assert batch["attention_mask"].shape == (4, 1, 32, 32)
        ids = [int(dataset[i]["dataset_id"]) for i in indices]
        assert batch["dataset_id"].tolist() == ids


def test_cu_seqlens_cut_after_every_eod(blend: Any) -> None:
    loader = build_pretraining_data_loader(
        blend, 0, micro_batch_size=3, return_cu_seqlens=True, create_attention_mask=False
    )
    batch = next(iter(loader))
    tokens = batch["tokens"].reshape(-1).numpy()
    cuts = [0] + [i + 1 for i in range(tokens.size) if tokens[i] == EOD or (i + 1) % 32 == 0]
    assert batch["cu_seqlens"].dtype == torch.int32 and batch["cu_seqlens"].tolist() == sorted(
        set(cuts)
    )
    assert batch["max_seqlen"].item() == max(numpy.diff(sorted(set(cuts))))
    assert "attention_mask" not in batch


@pytest.mark.timeout(180)
@pytest.mark.parametrize("context", ["fork", "spawn"])
@pytest.mark.processes
def test_workers_give_the_same_batches(blend: Any, context: str) -> None:
    def run(workers: int) -> list:
        loader = build_pretraining_data_loader(
            blend,
            0,
            dataloader_type="cyclic",
            micro_batch_size=4,
            data_parallel_rank=0,
            data_parallel_size=2,
            num_workers=workers,
            multiprocessing_context=context,
            data_sharding=False,
            create_attention_mask=False,
        )
        iterator = iter(loader)
        return [next(iterator)["tokens"].numpy().copy() for _ in range(10)]

    for left, right in zip(run(0), run(2)):
        numpy.testing.assert_array_equal(left, right)


def test_workers_get_a_small_pickle(blend: Any) -> None:
    loader = build_pretraining_data_loader(blend, 0, micro_batch_size=4)
    blend.get_batch([0])  # the index arrays are loaded in this process
    payload = len(pickle.dumps(loader.dataloader.dataset))
    index_bytes = blend.dataset_index.nbytes + sum(
        d.shuffle_index.nbytes + d.sample_index.nbytes + d.document_index.nbytes
        for d in blend.datasets
    )
    assert payload < 16_000 < index_bytes


def test_megatron_sampler_defaults_and_kinds(blend: Any) -> None:
    assert build_pretraining_data_loader(None, 0, micro_batch_size=1) is None
    assert (
        build_pretraining_data_loader(blend, 0, dataloader_type="external", micro_batch_size=1)
        is blend
    )
    cyclic = build_pretraining_data_loader(
        blend, 0, dataloader_type="cyclic", micro_batch_size=2, data_sharding=True, num_workers=1
    )
    assert isinstance(cyclic.batch_sampler, MegatronPretrainingRandomSampler)
    assert cyclic.dataloader.persistent_workers and not cyclic.dataloader.pin_memory
    assert cyclic.batch_sampler.total_samples == len(blend)


@pytest.mark.parametrize(
    "kwargs, word",
    [
        (dict(micro_batch_size=0), "micro_batch_size"),
        (
            dict(micro_batch_size=2, data_parallel_rank=4, data_parallel_size=4),
            "data_parallel_rank",
        ),
        (dict(micro_batch_size=2, dataloader_type="random"), "dataloader_type"),
        (dict(micro_batch_size=2, dataloader_type="elastic"), "global_batch_size"),
        (dict(micro_batch_size=2, num_workers=-1), "num_workers"),
        (dict(micro_batch_size=2, consumed_samples=10**9), "consumed_samples"),
    ],
)
def test_bad_arguments_are_config_errors(blend: Any, kwargs: dict, word: str) -> None:
    consumed = kwargs.pop("consumed_samples", 0)
    with pytest.raises(ConfigError, match=word):
        build_pretraining_data_loader(blend, consumed, **kwargs)


def test_single_ends_and_cyclic_goes_on(tmp_path: Path) -> None:
    from tests.training._data import IndexDataset, seen

    data = IndexDataset(10)
    single = build_pretraining_data_loader(data, 0, micro_batch_size=2, data_parallel_size=2)
    assert [seen(b) for b in single] == [[0, 1], [4, 5]]
    assert list(single) == []  # the state is at the end: no silent second epoch
    cyclic = iter(
        build_pretraining_data_loader(
            data, 0, dataloader_type="cyclic", micro_batch_size=2, data_parallel_size=2
        )
    )
    assert len([next(cyclic) for _ in range(9)]) == 9


def test_state_of_another_blend_is_refused(corpora: tuple, blend: Any) -> None:
    a, b, root = corpora
    other = build_train([a, b], root / "cache", 3000, weights=[0.5, 0.5])
    kwargs: dict[str, Any] = dict(dataloader_type="cyclic", micro_batch_size=4)
    saved = build_pretraining_data_loader(blend, 0, **kwargs)
    iterator = iter(saved)
    next(iterator)
    state = saved.state_dict()
    assert state["dataset"]["description_hash"] == blend.unique_description_hash
    with pytest.raises(ConfigError, match="another dataset"):
        build_pretraining_data_loader(other, 0, **kwargs).load_state_dict(state)
    resumed = build_pretraining_data_loader(blend, 0, **kwargs)
    resumed.load_state_dict(state)
    numpy.testing.assert_array_equal(next(iter(resumed))["tokens"], next(iterator)["tokens"])

"""A loader state over files that were replaced: refused, unless the swap is deliberate.

Regenerating a ``.bin``/``.idx`` pair with the same document lengths and other tokens
keeps the class, the length and Megatron's description hash of every dataset over it;
only the pair's identity (the one the index cache keys on) tells. Also: where nothing
changed, resume over real files stays exact (elastic dp 2 -> 4 -> 1 across epochs,
DataLoader workers), and states saved before the identities were recorded are refused
with the override in the message.
"""

from __future__ import annotations

import logging
import pickle
from pathlib import Path
from typing import Any

import numpy
import pytest
from tests.training._data import build_train, write_corpus

from tokenloom.datasets import GPTDatasetConfig, MockGPTDataset, Split
from tokenloom.errors import ConfigError
from tokenloom.format import IndexedDataset
from tokenloom.training import RandomSeedDataset, build_pretraining_data_loader

torch = pytest.importorskip("torch")

CYCLIC: dict[str, Any] = dict(dataloader_type="cyclic", micro_batch_size=4, data_sharding=False)


def rows(batch: Any) -> list[tuple]:
    return [tuple(row) for row in batch["tokens"].tolist()]


def take(iterator: Any, count: int) -> list[list[tuple]]:
    return [rows(next(iterator)) for _ in range(count)]


def regenerate(prefix: str, seed: int, documents: int) -> None:
    """The same document lengths (a byte-identical ``.idx``), other tokens."""
    idx_before = Path(prefix + ".idx").read_bytes()
    bin_before = Path(prefix + ".bin").read_bytes()
    mtime_before = Path(prefix + ".bin").stat().st_mtime_ns
    write_corpus(Path(prefix), documents, seed, token_seed=seed + 1000)
    assert Path(prefix + ".idx").read_bytes() == idx_before
    bin_after = Path(prefix + ".bin").read_bytes()
    assert len(bin_after) == len(bin_before) and bin_after != bin_before
    if Path(prefix + ".bin").stat().st_mtime_ns == mtime_before:
        pytest.skip("this filesystem's timestamps are too coarse to tell the files apart")


def saved_state(dataset: Any, batches: int, **kwargs: Any) -> tuple[dict, list]:
    """A pickled round trip of the state after ``batches`` batches, and those batches."""
    loader = build_pretraining_data_loader(dataset, 0, **kwargs)
    iterator = iter(loader)
    head = take(iterator, batches)
    return pickle.loads(pickle.dumps(loader.state_dict())), head


@pytest.mark.timeout(240)
@pytest.mark.processes
def test_regenerated_pair_is_refused_and_the_override_serves_the_new_tokens(
    tmp_path: Path,
) -> None:
    a = write_corpus(tmp_path / "a", 300, 1)
    b = write_corpus(tmp_path / "b", 200, 2)
    kwargs = dict(CYCLIC, num_workers=2, multiprocessing_context="fork")
    old = build_train([a, b], tmp_path / "cache", 600, weights=[0.5, 0.5])
    state, _ = saved_state(old, 5, **kwargs)
    assert set(state["dataset"]["files"]) == {a, b}
    regenerate(b, 2, 200)
    new = build_train([a, b], tmp_path / "cache", 600, weights=[0.5, 0.5])
    # what the old checks compare is unchanged: only the pair identity tells
    assert (len(new), new.unique_description_hash) == (len(old), old.unique_description_hash)
    loader = build_pretraining_data_loader(new, 0, **kwargs)
    with pytest.raises(ConfigError) as error:
        loader.load_state_dict(state)
    message = str(error.value)
    assert b in message and a + ":" not in message
    assert ".bin: mtime_ns" in message and "allow_data_change=True" in message
    # the deliberate swap: accepted, and the next batches are the new files' ones
    loader.load_state_dict(state, allow_data_change=True)
    resumed = take(iter(loader), 6)
    fresh = build_pretraining_data_loader(new, 0, **CYCLIC)
    assert resumed == take(iter(fresh), 11)[5:]
    stale = build_pretraining_data_loader(old, 0, **CYCLIC)
    assert resumed != take(iter(stale), 11)[5:]  # the old tokens are not served


def test_unchanged_files_resume_with_a_rebuilt_dataset(tmp_path: Path) -> None:
    a = write_corpus(tmp_path / "a", 300, 1)
    first = build_train([a], tmp_path / "cache", 400)
    state, head = saved_state(first, 3, **CYCLIC)
    again = build_train([a], tmp_path / "cache", 400)  # new objects, same files
    loader = build_pretraining_data_loader(again, 0, **CYCLIC)
    loader.load_state_dict(state)
    continuous = take(iter(build_pretraining_data_loader(first, 0, **CYCLIC)), 8)
    assert head + take(iter(loader), 5) == continuous


def test_a_pair_opened_directly_wrappers_and_mocks(tmp_path: Path) -> None:
    from tokenloom.training.data_identity import pair_identities

    a = write_corpus(tmp_path / "a", 50, 1)
    gpt = build_train([a], tmp_path / "cache", 100)
    pair = IndexedDataset(a)
    identity = pair.file_identity()
    assert identity is not None
    expected = {a: {part: dict(fields) for part, fields in identity.items()}}
    assert pair_identities(pair) == expected
    assert pair_identities(RandomSeedDataset(gpt, seed=3)) == expected
    config = GPTDatasetConfig(
        random_seed=3,
        sequence_length=32,
        tokenizer={"vocab_size": 50, "eod": 0},
        path_to_cache=str(tmp_path / "mock"),
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
    )
    low = MockGPTDataset.build_low_level_dataset(None, config)
    mock = MockGPTDataset(low, None, numpy.arange(500, dtype=numpy.int32), 20, Split.train, config)
    assert pair_identities(mock) == {}  # no files: nothing to identify
    state, head = saved_state(mock, 2, **dict(CYCLIC, micro_batch_size=2))
    loader = build_pretraining_data_loader(mock, 0, **dict(CYCLIC, micro_batch_size=2))
    loader.load_state_dict(state)
    assert state["dataset"]["files"] == {} and len(take(iter(loader), 2)) == 2


def _global_batches(loaders: list, count: int) -> list[list[tuple]]:
    iterators = [iter(loader) for loader in loaders]
    steps = 8 // (2 * len(loaders))  # global batch 8, micro-batch 2
    return [
        sorted(row for _ in range(steps) for it in iterators for row in rows(next(it)))
        for _ in range(count)
    ]


def _elastic(dataset: Any, dp: int, workers: int) -> list:
    return [
        build_pretraining_data_loader(
            dataset,
            0,
            dataloader_type="elastic",
            micro_batch_size=2,
            global_batch_size=8,
            seed=5,
            data_parallel_rank=rank,
            data_parallel_size=dp,
            num_workers=workers,
            multiprocessing_context="fork" if workers else None,
        )
        for rank in range(dp)
    ]


@pytest.mark.timeout(300)
@pytest.mark.processes
def test_elastic_resume_over_real_files_at_dp_2_4_1_across_epochs(tmp_path: Path) -> None:
    a = write_corpus(tmp_path / "a", 120, 1)
    b = write_corpus(tmp_path / "b", 80, 2)

    def dataset() -> Any:  # rebuilt for every phase, as a restarted job does
        return build_train([a, b], tmp_path / "cache", 40, weights=[0.5, 0.5])

    assert len(dataset()) // 8 <= 6  # an epoch is at most 6 global batches: phases cross it
    continuous = _global_batches(_elastic(dataset(), 1, 0), 12)
    loaders = _elastic(dataset(), 2, 1)
    got = _global_batches(loaders, 3)
    for dp, workers, count in ((4, 0, 5), (1, 2, 4)):
        state = pickle.loads(pickle.dumps(loaders[0].state_dict()))
        loaders = _elastic(dataset(), dp, workers)
        for loader in loaders:
            loader.load_state_dict(state)
        got += _global_batches(loaders, count)
    assert got == continuous


def test_old_format_states_are_refused_with_the_override_in_the_message(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    a = write_corpus(tmp_path / "a", 200, 1)
    dataset = build_train([a], tmp_path / "cache", 300)
    state, head = saved_state(dataset, 2, **CYCLIC)
    dropped = ("skip_batches", "sources", "mixture")  # /1 had no quarantine, no counts
    old = {k: v for k, v in state.items() if k not in dropped}
    old["format"] = "tokenloom.training.loader/1"
    old["dataset"] = {
        k: v for k, v in state["dataset"].items() if k not in ("files", "blocked_documents")
    }
    loader = build_pretraining_data_loader(dataset, 0, **CYCLIC)
    with pytest.raises(ConfigError, match=r"earlier tokenloom.*allow_data_change=True"):
        loader.load_state_dict(old)
    with caplog.at_level(logging.WARNING, logger="tokenloom.training.state"):
        loader.load_state_dict(old, allow_data_change=True)
    assert "did not record the identity" in caplog.text
    continuous = take(iter(build_pretraining_data_loader(dataset, 0, **CYCLIC)), 5)
    assert head + take(iter(loader), 3) == continuous


def test_the_override_is_a_bool_and_skips_only_the_file_check(tmp_path: Path) -> None:
    a = write_corpus(tmp_path / "a", 200, 1)
    dataset = build_train([a], tmp_path / "cache", 300)
    state, _ = saved_state(dataset, 2, **CYCLIC)
    loader = build_pretraining_data_loader(dataset, 0, **CYCLIC)
    with pytest.raises(ConfigError, match="allow_data_change must be True or False"):
        loader.load_state_dict(state, allow_data_change="yes")  # type: ignore[arg-type]
    other = build_pretraining_data_loader(dataset, 0, **dict(CYCLIC, micro_batch_size=2))
    with pytest.raises(ConfigError, match="micro_batch_size"):
        other.load_state_dict(state, allow_data_change=True)
    assert state["dataset"]["files"][a]["bin"]["size"] == Path(a + ".bin").stat().st_size

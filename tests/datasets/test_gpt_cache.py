"""GPTDataset with its index cache: reuse only when every input is unchanged; damaged or
missing caches are rebuilt or reported, never used; deferred mmap; fast_cache_load."""

from __future__ import annotations

import os

import numpy
import pytest
from tests.support.cache_files import array_extent
from tests.support.dataset_files import small_config, split_indices, write_corpus
from tests.support.waiting import wait_for_newer_mtime

from tokenloom.datasets import GPTDataset, GPTDatasetConfig, Split, _gpt_indices
from tokenloom.errors import CacheError
from tokenloom.index import reference

LENGTHS = numpy.random.default_rng(4).integers(2, 50, 70)


@pytest.fixture
def corpus(tmp_path):
    return write_corpus(tmp_path / "c", LENGTHS, seed=4)


def make(corpus, cache, split=Split.train, num_samples=25, build_if_missing=True, **overrides):
    config = small_config(corpus, cache, **overrides)
    low = GPTDataset.build_low_level_dataset(corpus, config)
    return GPTDataset(
        low,
        corpus,
        split_indices(config, split, len(low)),
        num_samples,
        split,
        config,
        build_if_missing=build_if_missing,
    )


def cache_files(directory, suffix):
    return sorted(p for p in os.listdir(directory) if p.endswith(suffix))


def same_indices(a, b):
    return all(
        numpy.array_equal(getattr(a, n), getattr(b, n))
        for n in ("document_index", "sample_index", "shuffle_index")
    )


def test_second_build_loads_the_cache(corpus, tmp_path, monkeypatch):
    first = make(corpus, tmp_path / "cache")
    assert len(cache_files(tmp_path / "cache", "-indices.cache")) == 1  # one file per entry
    assert cache_files(tmp_path / "cache", ".npy") == []
    monkeypatch.setattr(_gpt_indices, "build_indices", None)  # any rebuild would crash
    second = make(corpus, tmp_path / "cache", build_if_missing=False)
    assert same_indices(first, second) and second.cache_key == first.cache_key


def test_add_extra_token_toggle_misses_the_cache(corpus, tmp_path):
    """megatron-core 0.16.1 omits this field from its key and would reuse wrong indices."""
    with_extra = make(corpus, tmp_path / "cache")
    without = make(corpus, tmp_path / "cache", add_extra_token_to_sequence=False)
    assert with_extra.unique_description_hash == without.unique_description_hash  # megatron's key
    assert with_extra.cache_key.hash != without.cache_key.hash
    assert len(cache_files(tmp_path / "cache", "-indices.cache")) == 2
    fresh = make(corpus, tmp_path / "fresh", add_extra_token_to_sequence=False)
    assert same_indices(without, fresh) and not same_indices(with_extra, without)


def test_regenerated_dataset_misses_the_cache(corpus, tmp_path):
    old = make(corpus, tmp_path / "cache")
    wait_for_newer_mtime(f"{corpus}.idx")  # as a real regeneration later on would be
    write_corpus(corpus, LENGTHS[::-1], seed=9)  # same path, different documents
    new = make(corpus, tmp_path / "cache")
    assert new.cache_key.hash != old.cache_key.hash
    assert same_indices(new, make(corpus, tmp_path / "fresh"))
    with pytest.raises(CacheError):
        write_corpus(corpus, LENGTHS, seed=10)
        make(corpus, tmp_path / "cache", build_if_missing=False)


def test_missing_cache_without_permission_to_build(corpus, tmp_path):
    with pytest.raises(CacheError, match=r"indices\.cache is missing"):
        make(corpus, tmp_path / "cache", build_if_missing=False)
    assert not (tmp_path / "cache").exists()


def _damage(path, how, name=None):
    """Cut the file short inside ``name`` (an array, or the description header), or flip
    one byte there; without ``name``, at the end of the file."""
    data = bytearray(open(path, "rb").read())
    if name is None:
        first, count = len(data) - 4, 4
    elif name == "description":
        first, count = 40, 20
    else:
        first, count = array_extent(path, name)
    if how == "truncate":
        data = data[: first + count // 2]
    else:
        data[first + count // 2] ^= 0xFF
    open(path, "wb").write(bytes(data))


@pytest.mark.parametrize("name", ["sample_index", "shuffle_index", "description"])
@pytest.mark.parametrize("how", ["truncate", "flip"])
def test_damaged_cache_is_rebuilt_or_reported(corpus, tmp_path, name, how):
    good = make(corpus, tmp_path / "cache")
    path = os.path.join(tmp_path / "cache", cache_files(tmp_path / "cache", "-indices.cache")[0])
    _damage(path, how, name)
    with pytest.raises(CacheError):
        make(corpus, tmp_path / "cache", build_if_missing=False)
    rebuilt = make(corpus, tmp_path / "cache")
    assert same_indices(good, rebuilt)
    again = make(corpus, tmp_path / "cache", build_if_missing=False)  # repaired on disk
    assert same_indices(good, again)


def test_different_indices_under_the_same_key_are_not_reused(corpus, tmp_path):
    config = small_config(corpus, tmp_path / "cache")
    low = GPTDataset.build_low_level_dataset(corpus, config)
    a = GPTDataset(low, corpus, numpy.arange(0, 40, dtype=numpy.int32), 10, Split.train, config)
    b = GPTDataset(low, corpus, numpy.arange(10, 50, dtype=numpy.int32), 10, Split.train, config)
    assert a.cache_key == b.cache_key and set(b.document_index.tolist()) == set(range(10, 50))


def test_default_cache_directory_is_beside_the_data(corpus, tmp_path):
    ds = make(corpus, None)
    assert ds.cache.path_to_cache == os.path.join(corpus, "cache", "GPTDataset_indices")
    assert len(cache_files(ds.cache.path_to_cache, "-indices.cache")) == 1


@pytest.mark.parametrize(
    "split, drop_last", [(Split.train, True), (Split.valid, False), (Split.valid, True)]
)
@pytest.mark.parametrize("extra", [True, False])
@pytest.mark.parametrize("num_samples", [None, 7, 300])
def test_deferred_mmap(corpus, tmp_path, split, drop_last, extra, num_samples, monkeypatch):
    options = dict(
        add_extra_token_to_sequence=extra, drop_last_partial_validation_sequence=drop_last
    )
    built = make(corpus, tmp_path / "cache", split, num_samples, **options)
    monkeypatch.setattr(_gpt_indices, "build_indices", None)  # a rebuild would crash
    deferred = make(
        corpus,
        tmp_path / "cache",
        split,
        num_samples,
        defer_npy_index_mmap=True,
        build_if_missing=False,
        **options,
    )
    assert not deferred.indices_loaded
    assert len(deferred) == len(built)  # computed arithmetically
    assert not deferred.indices_loaded
    numpy.testing.assert_array_equal(deferred[0]["tokens"], built[0]["tokens"])
    assert deferred.indices_loaded and same_indices(deferred, built)


def test_deferred_mmap_needs_the_cache(corpus, tmp_path):
    with pytest.raises(CacheError, match="missing"):
        make(corpus, tmp_path / "cache", defer_npy_index_mmap=True, build_if_missing=False)
    built = make(corpus, tmp_path / "other", defer_npy_index_mmap=True)
    assert built.indices_loaded and len(built) >= 25


def test_deferred_mmap_reports_damage_at_first_access(corpus, tmp_path):
    make(corpus, tmp_path / "cache")
    deferred = make(corpus, tmp_path / "cache", defer_npy_index_mmap=True, build_if_missing=False)
    _damage(
        os.path.join(tmp_path / "cache", cache_files(tmp_path / "cache", "-indices.cache")[0]),
        "truncate",
    )
    with pytest.raises(CacheError, match="truncated"):
        deferred[0]


def _fast_config(corpus, cache, **overrides):
    return GPTDatasetConfig(
        random_seed=5,
        sequence_length=16,
        tokenizer={"vocab_size": 32000, "eod": 2},
        blend_per_split=[([corpus], None), None, None],
        path_to_cache=str(cache),
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        **overrides,
    )


def test_fast_cache_load(corpus, tmp_path):
    slow = _fast_config(corpus, tmp_path / "cache")
    low = GPTDataset.build_low_level_dataset(corpus, slow)
    built = GPTDataset(low, corpus, numpy.arange(70, dtype=numpy.int32), 20, Split.train, slow)
    fast = _fast_config(corpus, tmp_path / "cache", fast_cache_load=True)
    low = GPTDataset.build_low_level_dataset(corpus, fast)
    loaded = GPTDataset(low, corpus, None, 20, Split.train, fast)
    assert same_indices(built, loaded) and len(loaded) == len(built)
    with pytest.raises(CacheError, match="missing"):
        GPTDataset(low, corpus, None, 21, Split.train, fast)
    deferred = GPTDataset(
        low,
        corpus,
        None,
        20,
        Split.train,
        _fast_config(corpus, tmp_path / "cache", fast_cache_load=True, defer_npy_index_mmap=True),
    )
    assert len(deferred) == len(built)


def test_tokenizer_without_identifiers_gives_a_stable_key(corpus, tmp_path):
    class Tokenizer:  # no unique_identifiers, repr holds a memory address
        vocab_size, eod = 32000, 2

    first = make(corpus, tmp_path / "cache", tokenizer=Tokenizer())
    second = make(corpus, tmp_path / "cache", tokenizer=Tokenizer(), build_if_missing=False)
    assert first.cache_key == second.cache_key
    assert first.cache_identifiers["tokenizer"]["eod"] == 2


@pytest.mark.parametrize("seed", [5, 1234])
def test_kernel_and_generator_choices_give_the_same_indices(corpus, tmp_path, monkeypatch, seed):
    """The generator is restored from a saved seeded state on later builds: that may not
    change an index (the first build seeds afresh, later ones reuse the state)."""
    config = small_config(corpus, None, random_seed=seed)
    low = GPTDataset.build_low_level_dataset(corpus, config)
    indices = split_indices(config, Split.train, len(low))
    plan = _gpt_indices.plan_epochs(low.sequence_lengths, indices, 300, 16, 1, True, "test")
    built = []
    for _ in range(3):  # fresh state, then reused states
        built.append(_gpt_indices.build_indices(low.sequence_lengths, indices, plan, 16, 1, seed))
    for arrays in built[1:]:
        for a, b in zip(built[0], arrays):
            assert a.dtype == b.dtype and numpy.array_equal(a, b)
    fresh = numpy.random.RandomState(seed)  # what megatron-core seeds for every dataset
    expected = reference.build_document_index(
        indices, plan.num_epochs, fresh, plan.separate_final_epoch
    )
    assert plan.num_epochs > 1 and numpy.array_equal(built[0][0], expected)

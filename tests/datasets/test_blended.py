"""BlendedDataset on real token files: indices, samples, batches, validation, cache."""

from __future__ import annotations

import pickle

import numpy
import pytest
from tests.support.cache_files import array_extent, header
from tests.support.random_corpora import EOD, write_corpus

from tokenloom.cache import IndexCache
from tokenloom.datasets import GPTDataset, GPTDatasetConfig, SimpleTokenizer, Split
from tokenloom.datasets.blended import BLENDED_INDEX_NAMES, BlendedDataset
from tokenloom.errors import CacheError, ConfigError
from tokenloom.index import build_blending_indices


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpora")
    return [write_corpus(root / f"c{i}", n, seed=i) for i, n in enumerate((80, 40, 20))]


def make_config(path_to_cache=None, **overrides):
    fields = dict(
        random_seed=1234,
        sequence_length=32,
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        split="100,0,0",
        blend=([], None),
        tokenizer=SimpleTokenizer(32000, EOD),
        path_to_cache=None if path_to_cache is None else str(path_to_cache),
    )
    fields.update(overrides)
    return fields


def gpt(prefix, config, num_samples=None, split=Split.train):
    low = GPTDataset.build_low_level_dataset(prefix, config)
    indices = numpy.arange(GPTDataset.numel_low_level_dataset(low), dtype=numpy.int32)
    return GPTDataset(low, prefix, indices, num_samples, split, config)


@pytest.fixture
def config(corpora, tmp_path):
    fields = make_config(tmp_path / "cache")
    fields["blend"] = (list(corpora), None)
    return GPTDatasetConfig(**fields)


@pytest.fixture
def parts(corpora, config):
    return [gpt(prefix, config, num_samples=n) for prefix, n in zip(corpora, (120, 80, 40))]


def test_sized_blend_follows_the_kernel_and_returns_sub_samples(parts, config):
    blend = BlendedDataset(parts, [5, 3, 2], 200, config)
    want_index, want_sample = build_blending_indices(numpy.array([0.5, 0.3, 0.2]), 200)
    assert blend.weights == [0.5, 0.3, 0.2] and len(blend) == 200
    assert (
        blend.dataset_index.dtype == numpy.int16 and blend.dataset_sample_index.dtype == numpy.int64
    )
    assert numpy.array_equal(blend.dataset_index, want_index)
    assert numpy.array_equal(blend.dataset_sample_index, want_sample)
    for k in (0, 1, 57, 199, -1):
        sample = blend[k]
        j, s = int(blend.dataset_index[k]), int(blend.dataset_sample_index[k])
        assert sample["dataset_id"] == j and isinstance(sample["dataset_id"], numpy.int16)
        for field, value in parts[j][s].items():
            assert numpy.array_equal(sample[field], value)


def test_exhaustive_blend_takes_every_sample_once(parts, config):
    lengths = [len(p) for p in parts]
    blend = BlendedDataset(parts, lengths, None, config)
    assert len(blend) == sum(lengths) == blend.dataset_index.shape[0]
    for j, length in enumerate(lengths):
        taken = blend.dataset_sample_index[blend.dataset_index == j]
        assert numpy.array_equal(numpy.sort(taken), numpy.arange(length))


def test_get_batch_equals_stacked_samples(parts, config):
    blend = BlendedDataset(parts, [0.2, 0.5, 0.3], 150, config)
    indices = [0, 149, 3, None, -2, 77, 3]
    batch = blend.get_batch(indices)
    assert batch["dataset_id"].dtype == numpy.int16
    for b, k in enumerate(indices):
        if k is None:
            assert not batch["loss_mask"][b].any()
            continue
        sample = blend[k]
        assert batch["dataset_id"][b] == sample["dataset_id"]
        for field in ("tokens", "labels", "loss_mask", "position_ids"):
            assert numpy.array_equal(batch[field][b], sample[field]), (k, field)
    out = {name: numpy.zeros_like(array) for name, array in batch.items() if name != "dataset_id"}
    again = blend.get_batch(indices, out=out)
    assert again["tokens"] is out["tokens"] and numpy.array_equal(out["tokens"], batch["tokens"])
    with pytest.raises(ConfigError, match="out\\['tokens'\\]"):
        blend.get_batch([0], out={"tokens": numpy.zeros((1, 3))})


@pytest.mark.parametrize("k", [150, -151])
def test_out_of_range(parts, config, k):
    blend = BlendedDataset(parts, [1.0, 1.0, 1.0], 150, config)
    with pytest.raises(IndexError, match="out of range"):
        blend[k]
    with pytest.raises(IndexError):
        blend.get_batch([0, k])


def test_oversampling_is_a_config_error_naming_the_surplus(corpora, config):
    small = gpt(corpora[2], config, num_samples=None)  # one epoch only
    big = gpt(corpora[0], config, num_samples=100)
    with pytest.raises(ConfigError, match="mid_level_dataset_surplus") as info:
        BlendedDataset([big, small], [0.5, 0.5], 2 * len(small) + 10, config)
    assert corpora[2] in str(info.value) and f"only {len(small)}" in str(info.value)
    assert not isinstance(info.value, AssertionError)


@pytest.mark.parametrize(
    "weights, size, message",
    [
        ([0.5, 0.5], 10, "2 weights"),
        ([1.0, 0.0, 1.0], 10, "> 0"),
        ([1.0, -1.0, 1.0], 10, "> 0"),
        ([1.0, float("nan"), 1.0], 10, "> 0"),
        ([1, 2.0, 3], 10, "mix integers and floats"),
        ([1.5, 2.0, 3.0], None, "whole numbers"),
        ([1.0, 1.0, 1.0], -1, "size=-1"),
        ([1.0, 1.0, 1.0], 2.5, "size=2.5"),
    ],
)
def test_bad_arguments(parts, config, weights, size, message):
    with pytest.raises(ConfigError, match=message):
        BlendedDataset(parts, weights, size, config)


def test_datasets_must_share_class_and_split(corpora, config, parts):
    other_split = gpt(corpora[1], config, num_samples=10, split=Split.valid)
    with pytest.raises(ConfigError, match="one split"):
        BlendedDataset([parts[0], other_split], [1.0, 1.0], 10, config)
    with pytest.raises(ConfigError, match="at least one"):
        BlendedDataset([], [], 10, config)


def _description(blend) -> dict:
    return header(blend.cache.description_path(blend.cache_key))[0]["description"]


def test_cache_key_covers_every_input(parts, config, tmp_path):
    blend = BlendedDataset(parts, [5, 3, 2], 100, config)
    description = _description(blend)
    assert description["weights"] == [0.5, 0.3, 0.2] and description["size"] == 100
    assert description["split"] == "train" and len(description["datasets"]) == 3
    # each contributing dataset enters by the stem of its own cache key, which hashes its
    # full identity (data files included)
    assert description["datasets"] == [part.cache_key.stem for part in parts]
    assert parts[0].cache_identifiers["data"]["idx"]["size"] > 0
    keys = {blend.cache_key.hash}
    for weights, size in (([5, 3, 3], 100), ([5, 3, 2], 101)):
        keys.add(BlendedDataset(parts, weights, size, config).cache_key.hash)
    keys.add(BlendedDataset(parts[::-1], [2, 3, 5], 100, config).cache_key.hash)
    assert len(keys) == 4
    names = sorted(p.name for p in (tmp_path / "cache").glob("*BlendedDataset*"))
    assert len(names) == 4  # one file per blend: description and both arrays


def _corrupt(path, how: str, target: str) -> None:
    data = bytearray(path.read_bytes())
    if target != "description":
        first, count = array_extent(path, target)
    if how == "truncate":
        path.write_bytes(bytes(data[: first + count // 2]))
    elif how == "flip":
        data[first + count - 3] ^= 0xFF
        path.write_bytes(bytes(data))
    else:
        path.write_bytes(b"{not json")


@pytest.mark.parametrize(
    "target, how",
    [
        ("dataset_index", "truncate"),
        ("dataset_sample_index", "flip"),
        ("description", "garbage"),
    ],
)
def test_corrupted_cache_is_rebuilt_or_reported(parts, config, tmp_path, target, how):
    first = BlendedDataset(parts, [5, 3, 2], 100, config)
    want = [numpy.array(first.dataset_index), numpy.array(first.dataset_sample_index)]
    paths = first.cache.paths(first.cache_key, BLENDED_INDEX_NAMES)
    paths["description"] = first.cache.description_path(first.cache_key)
    from pathlib import Path

    _corrupt(Path(paths[target]), how, target)
    with pytest.raises(CacheError, match=first.cache_key.stem):
        BlendedDataset(parts, [5, 3, 2], 100, config, build_if_missing=False)
    rebuilt = BlendedDataset(parts, [5, 3, 2], 100, config)
    assert numpy.array_equal(rebuilt.dataset_index, want[0])
    assert numpy.array_equal(rebuilt.dataset_sample_index, want[1])
    assert IndexCache(config.path_to_cache).lookup(first.cache_key, BLENDED_INDEX_NAMES) is not None


def test_missing_cache_without_build_names_the_file(parts, config):
    with pytest.raises(CacheError, match="BlendedDataset-train"):
        BlendedDataset(parts, [5, 3, 2], 100, config, build_if_missing=False)


def test_deferred_mmap_pickle_and_no_cache(corpora, parts, config):
    first = BlendedDataset(parts, [5, 3, 2], 100, config)
    fields = make_config(config.path_to_cache, defer_npy_index_mmap=True)
    fields["blend"] = (list(corpora), None)
    deferred = BlendedDataset(parts, [5, 3, 2], 100, GPTDatasetConfig(**fields))
    assert not deferred.indices_loaded and len(deferred) == 100
    assert numpy.array_equal(deferred[7]["tokens"], first[7]["tokens"])
    clone = pickle.loads(pickle.dumps(deferred))
    assert numpy.array_equal(clone.dataset_index, first.dataset_index)
    uncached = make_config(None)
    uncached["blend"] = (list(corpora), None)
    plain = BlendedDataset(parts, [5, 3, 2], 100, GPTDatasetConfig(**uncached))
    assert plain.cache is None and numpy.array_equal(plain.dataset_index, first.dataset_index)


@pytest.mark.parametrize("defer", [False, True])
def test_cached_indices_with_valid_checksums_but_out_of_range_are_a_cache_error(
    parts, config, defer
):
    """An entry written by hand (or an old bug): checksums valid, a sample index beyond
    its dataset. It is refused when loaded, naming the entry, never served."""
    blend = BlendedDataset(parts, [5, 3, 2], 200, config)
    arrays = {name: numpy.array(getattr(blend, name)) for name in BLENDED_INDEX_NAMES}
    arrays["dataset_sample_index"][7] = len(parts[int(arrays["dataset_index"][7])]) + 5
    blend.cache.store(blend.cache_key, arrays)  # a valid entry file, wrong values
    import dataclasses

    loaded_config = dataclasses.replace(config, defer_npy_index_mmap=defer)
    with pytest.raises(
        CacheError, match=r"index cache .*indices\.cache: dataset_sample_index\[7\]"
    ):
        again = BlendedDataset(parts, [5, 3, 2], 200, loaded_config)
        again[7]

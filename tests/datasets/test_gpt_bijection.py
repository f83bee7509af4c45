"""GPTDataset with ``shuffle_mode="bijection"``: no shuffle_index is built or cached,
every sample is served once per shuffle range, each equal to the exact-mode sample of
the row the bijection names; get_batch and document ranges agree with ``dataset[i]``;
the mode keys the cache and the description."""

from __future__ import annotations

import numpy
import pytest
from tests.support.dataset_files import small_config, split_indices, write_corpus

from tokenloom.cache import IndexCache
from tokenloom.datasets import GPTDataset, Split
from tokenloom.errors import CacheError
from tokenloom.index.bijection import BijectionShuffle, reference_rows
from tokenloom.kernels import KERNELS

FIELDS = ("tokens", "labels", "loss_mask", "position_ids")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    lengths = numpy.random.default_rng(8).integers(2, 60, 80)
    return write_corpus(tmp_path_factory.mktemp("corpus") / "c", lengths, seed=8, vocab=90)


def make(corpus, cache, mode, num_samples=250, split=Split.train, build=True, **overrides):
    config = small_config(corpus, cache, shuffle_mode=mode, **overrides)
    low = GPTDataset.build_low_level_dataset(corpus, config)
    indices = split_indices(config, split, len(low))
    return GPTDataset(low, corpus, indices, num_samples, split, config, build_if_missing=build)


def same(a, b):
    for name in FIELDS:
        numpy.testing.assert_array_equal(a[name], b[name], err_msg=name)


@pytest.mark.parametrize("num_samples", [None, 250, 330])  # 250: a separate final epoch
def test_every_sample_once_and_equal_to_the_exact_row(corpus, tmp_path, num_samples):
    exact = make(corpus, tmp_path / "exact", "exact", num_samples)
    bij = make(corpus, tmp_path / "bij", "bijection", num_samples)
    assert len(bij) == len(exact)
    shuffle = bij.shuffle_index
    assert isinstance(shuffle, BijectionShuffle)
    numpy.testing.assert_array_equal(bij.document_index, exact.document_index)
    numpy.testing.assert_array_equal(bij.sample_index, exact.sample_index)
    rows = numpy.asarray(shuffle)
    first, total = shuffle.first, len(bij)
    assert (first < total) == (num_samples == 250), (first, total)
    assert (numpy.asarray(exact.shuffle_index)[:first] < first).all()  # Megatron's ranges
    assert numpy.array_equal(numpy.sort(rows[:first]), numpy.arange(first))
    assert numpy.array_equal(numpy.sort(rows[first:]), numpy.arange(first, total))
    assert numpy.array_equal(rows, reference_rows(shuffle.table, numpy.arange(total)))
    assert (rows != numpy.arange(total)).mean() > 0.9  # shuffled
    where = numpy.argsort(numpy.asarray(exact.shuffle_index))  # exact position of each row
    for k in range(total):
        same(bij[k], exact[int(where[rows[k]])])
    same(bij[None], exact[int(where[rows[0]])] | {"loss_mask": numpy.zeros(16, numpy.float32)})


def test_no_shuffle_index_in_the_cache_and_modes_never_mix(corpus, tmp_path):
    exact = make(corpus, tmp_path, "exact")
    bij = make(corpus, tmp_path, "bijection")
    assert exact.cache_key.stem != bij.cache_key.stem
    assert exact.unique_description_hash != bij.unique_description_hash
    assert "shuffle_mode" not in exact.unique_identifiers  # megatron-core's description
    assert bij.unique_identifiers["shuffle_mode"] == "bijection"
    stored = IndexCache(str(tmp_path)).load(bij.cache_key, ("shuffle_index",), verify="checksum")
    table = stored["shuffle_index"]
    assert table.dtype == numpy.uint64 and table.shape == (2, 8)  # 128 bytes, not 4 a sample
    again = make(corpus, tmp_path, "bijection")  # loaded from the cache
    assert again.shuffle_index == bij.shuffle_index
    same(again[7], bij[7])


def test_a_wrong_cached_table_is_refused(corpus, tmp_path):
    bij = make(corpus, tmp_path, "bijection")
    key, cache = bij.cache_key, IndexCache(str(tmp_path))
    names = ("document_index", "sample_index", "shuffle_index")
    arrays = {n: numpy.asarray(a) for n, a in cache.load(key, names, verify="checksum").items()}
    arrays["shuffle_index"] = numpy.arange(len(bij), dtype=numpy.uint32)
    cache.store(key, arrays, checks=bij.cached_indices.checks)
    with pytest.raises(CacheError, match="bijection dataset's cached shuffle_index"):
        make(corpus, tmp_path, "bijection", build=False)


@pytest.mark.parametrize("numba", [True, False])
def test_get_batch_equals_stacked_samples(corpus, tmp_path, monkeypatch, numba):
    if not numba:
        monkeypatch.setenv("TOKENLOOM_DISABLE_NUMBA", "1")
    elif KERNELS.get("batch") is None:
        pytest.skip("numba kernels unavailable")
    bij = make(corpus, tmp_path, "bijection", return_document_ranges=True)
    inputs = bij.batch_inputs()
    assert inputs.bijection is bij.shuffle_index and inputs.kernel_args is not None
    positions = [0, 5, None, len(bij) - 1, 17, 17, 3, 200, 42, 99, 1, 2, 8, 13, 21, 34, 55]
    batch = bij.get_batch(positions)
    for b, k in enumerate(positions):
        sample = bij[k]
        for name in FIELDS:
            numpy.testing.assert_array_equal(batch[name][b], sample[name], err_msg=name)
        ranges = sample["document_ranges"]
        numpy.testing.assert_array_equal(batch["document_ranges"][b][: len(ranges)], ranges)
        assert batch["document_range_counts"][b] == len(ranges)
    with pytest.raises(Exception, match="out of range"):
        bij.get_batch([0, len(bij)])

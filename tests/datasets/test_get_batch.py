"""get_batch (numba kernel and fallback) fills exactly the values of stacked dataset[i]."""

from __future__ import annotations

import numpy
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.support.dataset_files import small_config, split_indices, write_corpus

from tokenloom.datasets import GPTDataset, Split
from tokenloom.datasets._batch import BATCH_FIELDS, allocate_batch
from tokenloom.errors import ConfigError


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    lengths = numpy.random.default_rng(8).integers(2, 60, 80)
    return write_corpus(tmp_path_factory.mktemp("batch") / "c", lengths, seed=8, vocab=40)


def make(corpus, cache, split=Split.train, num_samples=40, **overrides):
    config = small_config(corpus, cache, create_attention_mask=False, **overrides)
    low = GPTDataset.build_low_level_dataset(corpus, config)
    return GPTDataset(
        low, corpus, split_indices(config, split, len(low)), num_samples, split, config
    )


def stacked(ds, indices):
    rows = [ds[i] for i in indices]
    return {name: numpy.stack([row[name] for row in rows]) for name in BATCH_FIELDS}


OPTIONS = st.fixed_dictionaries(
    {
        "reset_position_ids": st.booleans(),
        "eod_mask_loss": st.booleans(),
        "add_extra_token_to_sequence": st.booleans(),
        "sequence_length": st.integers(2, 70),
        "tokenizer": st.sampled_from(
            [{"vocab_size": 40, "eod": 2}, {"vocab_size": 40, "eod": 2, "pad": 5}]
        ),
    }
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    options=OPTIONS,
    split=st.sampled_from(list(Split)),
    numba=st.booleans(),
    drop_last=st.booleans(),
    data=st.data(),
)
def test_get_batch_equals_stacked_samples(
    corpus, tmp_path, monkeypatch, options, split, numba, drop_last, data
):
    monkeypatch.setenv("TOKENLOOM_DISABLE_NUMBA", "0" if numba else "1")
    ds = make(
        corpus, tmp_path, split, None, drop_last_partial_validation_sequence=drop_last, **options
    )
    position = st.one_of(st.none(), st.integers(-len(ds), len(ds) - 1))
    indices = data.draw(st.lists(position, min_size=1, max_size=12))
    expected = stacked(ds, indices)
    batch = ds.get_batch(indices)
    for name, dtype in BATCH_FIELDS.items():
        assert batch[name].dtype == dtype and batch[name].shape == expected[name].shape
        numpy.testing.assert_array_equal(batch[name], expected[name], err_msg=name)


def test_kernel_is_used_when_numba_is_installed(monkeypatch):
    pytest.importorskip("numba")
    monkeypatch.delenv("TOKENLOOM_DISABLE_NUMBA", raising=False)
    from tokenloom.kernels import KERNELS

    assert KERNELS.get("batch") is not None
    monkeypatch.setenv("TOKENLOOM_DISABLE_NUMBA", "1")
    assert KERNELS.get("batch") is None


def test_fills_the_given_arrays(corpus, tmp_path):
    ds = make(corpus, tmp_path)
    out = allocate_batch(3, 16)
    for array in out.values():
        array.fill(77)
    result = ds.get_batch(numpy.array([0, 1, 2]), out=out)
    assert all(result[name] is out[name] for name in BATCH_FIELDS)
    numpy.testing.assert_array_equal(out["tokens"], stacked(ds, [0, 1, 2])["tokens"])


def test_file_pointer_reader_uses_the_fallback(corpus, tmp_path):
    ds = make(corpus, tmp_path, mmap_bin_files=False, reset_position_ids=True)
    indices = [3, None, 7]
    batch = ds.get_batch(indices)
    for name, values in stacked(ds, indices).items():
        numpy.testing.assert_array_equal(batch[name], values)


def test_bad_arguments(corpus, tmp_path):
    ds = make(corpus, tmp_path)
    with pytest.raises(IndexError):
        ds.get_batch([0, len(ds)])
    out = allocate_batch(2, 16)
    out["loss_mask"] = out["loss_mask"].astype(numpy.float64)
    with pytest.raises(ConfigError, match="loss_mask"):
        ds.get_batch([0, 1], out=out)
    with pytest.raises(ConfigError, match="shape"):
        ds.get_batch([0, 1, 2], out=allocate_batch(2, 16))
    frozen = allocate_batch(1, 16)
    frozen["tokens"].flags.writeable = False
    with pytest.raises(ConfigError, match="writable"):
        ds.get_batch([0], out=frozen)
    assert ds.get_batch([])["tokens"].shape == (0, 16)

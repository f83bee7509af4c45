"""dataset[i]: the numba fast path (``fill_sample``) gives exactly the general path's samples."""

from __future__ import annotations

import numpy
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.support.dataset_files import small_config, split_indices, write_corpus

from tokenloom.datasets import GPTDataset, Split
from tokenloom.datasets._fast_sample import fast_fetch
from tokenloom.datasets._sample import general_fetch
from tokenloom.datasets._tokens import TokenSource

pytest.importorskip("numba")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    lengths = numpy.random.default_rng(12).integers(1, 50, 90)
    return write_corpus(tmp_path_factory.mktemp("paths") / "c", lengths, seed=12, vocab=40)


def make(corpus, cache, split, **overrides):
    config = small_config(corpus, cache, **overrides)
    low = GPTDataset.build_low_level_dataset(corpus, config)
    return GPTDataset(low, corpus, split_indices(config, split, len(low)), None, split, config)


def general(ds, monkeypatch):
    """``fetch`` by the general path over pure-numpy token reads (no numba anywhere)."""
    monkeypatch.setenv("TOKENLOOM_DISABLE_NUMBA", "1")
    source = TokenSource(ds.dataset)
    monkeypatch.delenv("TOKENLOOM_DISABLE_NUMBA")
    assert source.kernel is None and source.sample_kernel is None
    _, maker = ds.sampler()
    return general_fetch(
        maker, source, ds.document_index, ds.sample_index, ds.shuffle_index, len(ds)
    )


def fast(ds):
    """``fetch`` by the kernel, loaded synchronously (no general-path fallback)."""
    source, maker = ds.sampler()
    fetch = fast_fetch(
        maker,
        source,
        ds.document_index,
        ds.sample_index,
        ds.shuffle_index,
        len(ds),
        background=False,
    )
    assert source.sample_kernel is not None
    return fetch


def assert_same_sample(got, expected):
    assert list(got) == list(expected)
    for name, value in expected.items():
        assert got[name].dtype == value.dtype, name
        numpy.testing.assert_array_equal(got[name], value, err_msg=name)


OPTIONS = st.fixed_dictionaries(
    {
        "reset_position_ids": st.booleans(),
        "eod_mask_loss": st.booleans(),
        "reset_attention_mask": st.booleans(),
        "create_attention_mask": st.booleans(),
        "add_extra_token_to_sequence": st.booleans(),
        "sequence_length": st.integers(2, 90),
        "drop_last_partial_validation_sequence": st.booleans(),
        "tokenizer": st.sampled_from(
            [
                {"vocab_size": 40, "eod": 2},
                {"vocab_size": 40, "eod": 2, "pad": 5},
                {"vocab_size": 40, "eod": 7, "pad": 2},
            ]
        ),
    }
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(options=OPTIONS, split=st.sampled_from(list(Split)), data=st.data())
def test_fast_path_equals_general_path(corpus, tmp_path, monkeypatch, options, split, data):
    if options["create_attention_mask"] and options["reset_attention_mask"]:
        options["reset_attention_mask"] = False  # per-sample masks: general path only
    ds = make(corpus, tmp_path, split, **options)
    reference, quick = general(ds, monkeypatch), fast(ds)
    assert ds.sampler()[1].fast_path_applies(ds.sampler()[0])
    positions = st.one_of(st.none(), st.integers(-len(ds), len(ds) - 1))
    for idx in data.draw(st.lists(positions, min_size=1, max_size=8)):
        expected = reference(idx)
        assert_same_sample(quick(idx), expected)
        assert_same_sample(ds[idx], expected)


@pytest.mark.parametrize(
    "overrides",
    [dict(return_cu_seqlens=True), dict(create_attention_mask=True, reset_attention_mask=True)],
)
def test_configs_the_kernel_cannot_serve_take_the_general_path(
    corpus, tmp_path, monkeypatch, overrides
):
    ds = make(corpus, tmp_path, Split.train, reset_position_ids=True, **overrides)
    source, maker = ds.sampler()
    assert not maker.fast_path_applies(source)
    reference = general(ds, monkeypatch)
    for idx in (3, None, -1):
        assert_same_sample(ds[idx], reference(idx))
    assert ("cu_seqlens" in ds[3]) == ("return_cu_seqlens" in overrides)


def test_bad_indices_raise_like_before(corpus, tmp_path):
    ds = make(corpus, tmp_path, Split.train, create_attention_mask=False)
    for bad in (len(ds), -len(ds) - 1, 2**70):
        with pytest.raises(IndexError, match="out of range"):
            ds[bad]
    for bad in (1.0, "1", [1]):
        with pytest.raises(TypeError, match="sample index must be an integer"):
            ds[bad]
    assert_same_sample(ds[numpy.int32(2)], ds[2])
    assert_same_sample(ds[-1], ds[len(ds) - 1])


def test_sample_fields_are_independent_writable_arrays(corpus, tmp_path):
    ds = make(corpus, tmp_path, Split.train, create_attention_mask=False)
    first, again = ds[4], ds[4]
    for name, value in first.items():
        assert value.flags.writeable and value.flags.c_contiguous, name
        value.fill(-3 if value.dtype.kind == "i" else 0.5)
    others = [v for s in (again, ds[4]) for v in s.values()] + list(first.values())
    for a in range(len(others)):
        for b in range(a + 1, len(others)):
            assert not numpy.shares_memory(others[a], others[b])
    assert_same_sample(again, ds[4])
    assert (again["position_ids"] == numpy.arange(16)).all()
    assert (again["loss_mask"] == 1.0).all()


def test_padding_sample_is_sample_zero_without_loss(corpus, tmp_path):
    ds = make(corpus, tmp_path, Split.train, create_attention_mask=False)
    padding, zero = ds[None], ds[0]
    assert (padding["loss_mask"] == 0).all() and (zero["loss_mask"] == 1).all()
    numpy.testing.assert_array_equal(padding["tokens"], zero["tokens"])


def test_reloaded_indices_rebind_the_sampler(corpus, tmp_path):
    """A pickled copy (indices reopened) serves the same samples through its own binding."""
    import pickle

    ds = make(corpus, tmp_path, Split.train, create_attention_mask=False)
    expected = ds[5]
    copy = pickle.loads(pickle.dumps(ds))
    for k in (5, 0, len(ds) - 1):
        assert_same_sample(copy[k], ds[k])
    assert_same_sample(copy[5], expected)


def test_index_types_take_the_same_sample(corpus, tmp_path, monkeypatch):
    ds = make(corpus, tmp_path, Split.train, create_attention_mask=False)
    reference, quick = general(ds, monkeypatch), fast(ds)
    for idx in (True, False, numpy.int64(3), numpy.uint8(3), numpy.int16(-2), numpy.intp(0)):
        assert_same_sample(quick(idx), reference(idx))


def test_a_document_outside_the_bin_raises_format_error_on_both_paths(
    corpus, tmp_path, monkeypatch
):
    """A corrupt .idx pointer (past the end of the .bin) names the sequence; the samples
    not touching it are served unchanged."""
    from tokenloom.errors import FormatError

    ds = make(corpus, tmp_path, Split.train, create_attention_mask=False)
    expected = [general(ds, monkeypatch)(k) for k in range(len(ds))]
    source, maker = ds.sampler()
    bad_doc = int(ds.document_index[int(ds.sample_index[ds.shuffle_index[0], 0])])
    source.pointers = source.pointers.copy()
    source.pointers[bad_doc] = source.tokens.nbytes
    paths = [
        fast_fetch(
            maker,
            source,
            ds.document_index,
            ds.sample_index,
            ds.shuffle_index,
            len(ds),
            background=False,
        ),
        general_fetch(maker, source, ds.document_index, ds.sample_index, ds.shuffle_index, len(ds)),
    ]
    for fetch in paths:
        hits = 0
        for k in range(len(ds)):
            row = int(ds.shuffle_index[k])
            begin, end = (int(v) for v in ds.sample_index[row : row + 2, 0])
            if bad_doc in ds.document_index[begin : end + 1]:
                hits += 1
                with pytest.raises(FormatError, match=f"sequence {bad_doc} has pointer"):
                    fetch(k)
            else:
                assert_same_sample(fetch(k), expected[k])
        assert hits >= 1


def test_compiled_entry_equals_the_dispatcher_and_falls_back(corpus, tmp_path):
    from tokenloom.datasets._fast_sample import kernel_params, sample_arguments
    from tokenloom.kernels import compiled_entry

    ds = make(corpus, tmp_path, Split.train, create_attention_mask=False)
    fast(ds)
    source, maker = ds.sampler()
    kernel = source.sample_kernel
    params = kernel_params(maker, source)
    arguments = sample_arguments(
        source, ds.document_index, ds.sample_index, ds.shuffle_index, params, maker.seq
    )
    entry = compiled_entry(kernel, arguments)
    assert entry is not kernel  # the machine code itself, loaded by fast()
    for k in (0, len(ds) - 1):
        args = list(arguments)
        args[6] = k
        assert entry(*args) == 0
        by_entry = [a.copy() for a in args[8:]]
        assert kernel(*args) == 0
        by_dispatcher = [a.copy() for a in args[8:]]
        for a, b in zip(by_entry, by_dispatcher):
            numpy.testing.assert_array_equal(a, b)
    never_compiled = arguments[:7] + (params.astype(numpy.float64),) + arguments[8:]
    assert compiled_entry(kernel, never_compiled) is kernel
    not_a_dispatcher = object()
    assert compiled_entry(not_a_dispatcher, arguments) is not_a_dispatcher

"""BlendedDataset.get_batch (one pass, rows written in place) equals stacking blend[i].

Random blends of real corpora with different token dtypes, random index lists (padding
``None``, negative indices), numba kernel and readable path, fresh and reused ``out``;
out-of-range indices give tokenloom's SampleIndexError. ``fill_rows`` (the kernel with
its row map) is compared with its readable twin ``reference_rows`` directly too.
"""

from __future__ import annotations

import numpy
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.support.dataset_files import write_corpus

from tokenloom.datasets import GPTDataset, GPTDatasetConfig, Split
from tokenloom.datasets._batch import BATCH_FIELDS, allocate_batch, fill_rows, reference_rows
from tokenloom.datasets.blended import BlendedDataset
from tokenloom.errors import SampleIndexError, TokenloomError

DTYPES = (numpy.uint8, numpy.uint16, numpy.int32)
VOCAB = 200
SUPPRESS = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    """One corpus per token dtype (same vocabulary, different documents)."""
    root = tmp_path_factory.mktemp("blend-batch")
    out = {}
    for i, dtype in enumerate(DTYPES):
        lengths = numpy.random.default_rng(20 + i).integers(2, 50, 40 + 10 * i)
        out[numpy.dtype(dtype).name] = write_corpus(
            root / f"c{i}", lengths, seed=20 + i, vocab=VOCAB, dtype=dtype
        )
    return out


def _config(prefixes, **options):
    fields = dict(
        random_seed=7,
        sequence_length=24,
        split="100,0,0",
        blend=(prefixes, None),
        tokenizer={"vocab_size": VOCAB, "eod": 2},
        path_to_cache=None,
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        create_attention_mask=False,
    )
    fields.update(options)
    return GPTDatasetConfig(**fields)


def _blend(corpora, names, weights, size, **options):
    prefixes = [corpora[name] for name in names]
    config = _config(prefixes, **options)
    parts = []
    for prefix in prefixes:
        low = GPTDataset.build_low_level_dataset(prefix, config)
        documents = numpy.arange(GPTDataset.numel_low_level_dataset(low), dtype=numpy.int32)
        parts.append(GPTDataset(low, prefix, documents, size, Split.train, config))
    return BlendedDataset(parts, weights, size, config)


def _stacked(blend, indices):
    rows = [blend.datasets[0][None] if i is None else blend[i] for i in indices]
    fields = {name: numpy.stack([row[name] for row in rows]) for name in BATCH_FIELDS}
    ids = numpy.array(
        [0 if i is None else int(row["dataset_id"]) for i, row in zip(indices, rows)],
        dtype=numpy.int16,
    )
    return {**fields, "dataset_id": ids}


OPTIONS = st.fixed_dictionaries(
    {
        "reset_position_ids": st.booleans(),
        "eod_mask_loss": st.booleans(),
        "add_extra_token_to_sequence": st.booleans(),
        "sequence_length": st.integers(2, 40),
        # pad 300 cannot occur in a uint8 corpus: the kernels skip the pad scan there only
        "tokenizer": st.sampled_from(
            [
                {"vocab_size": VOCAB, "eod": 2},
                {"vocab_size": VOCAB, "eod": 2, "pad": 5},
                {"vocab_size": 2 * VOCAB, "eod": 2, "pad": 300},
            ]
        ),
    }
)
NAMES = st.lists(st.sampled_from([numpy.dtype(d).name for d in DTYPES]), min_size=1, max_size=4)


@settings(max_examples=60, deadline=None, suppress_health_check=SUPPRESS)
@given(
    names=NAMES,
    options=OPTIONS,
    numba=st.booleans(),
    reuse=st.booleans(),
    size=st.integers(1, 60),
    data=st.data(),
)
def test_blended_get_batch_equals_stacked_samples(
    corpora, monkeypatch, names, options, numba, reuse, size, data
):
    weights = data.draw(st.lists(st.floats(0.1, 5.0), min_size=len(names), max_size=len(names)))
    monkeypatch.setenv("TOKENLOOM_DISABLE_NUMBA", "1")  # the readable path serves blend[i]
    readable = _blend(corpora, names, weights, size, **options)
    position = st.one_of(st.none(), st.integers(-len(readable), len(readable) - 1))
    indices = data.draw(st.lists(position, min_size=1, max_size=12))
    expected = _stacked(readable, indices)
    monkeypatch.setenv("TOKENLOOM_DISABLE_NUMBA", "0" if numba else "1")
    blend = _blend(corpora, names, weights, size, **options)
    out = None
    if reuse:  # garbage in every cell: each one must be written
        out = allocate_batch(len(indices), blend.config.sequence_length)
        for array in out.values():
            array.fill(77)
    batch = blend.get_batch(indices, out=out)
    assert sorted(batch) == sorted(expected)
    for name, value in expected.items():
        assert batch[name].dtype == value.dtype and batch[name].shape == value.shape, name
        numpy.testing.assert_array_equal(batch[name], value, err_msg=name)
        if out is not None and name in out:
            assert batch[name] is out[name]


@settings(max_examples=40, deadline=None, suppress_health_check=SUPPRESS)
@given(name=st.sampled_from([numpy.dtype(d).name for d in DTYPES]), options=OPTIONS, data=st.data())
def test_fill_rows_kernel_equals_its_readable_twin(corpora, monkeypatch, name, options, data):
    """Row ``dest[i]`` <- sample ``positions[i]``, for any row map (a subset, any order):
    the kernel against ``reference_rows`` over a dataset that serves ``dataset[i]`` by the
    readable path."""
    pytest.importorskip("numba")
    monkeypatch.setenv("TOKENLOOM_DISABLE_NUMBA", "1")
    readable = _blend(corpora, [name], [1.0], 30, **options).datasets[0]
    monkeypatch.setenv("TOKENLOOM_DISABLE_NUMBA", "0")
    dataset = _blend(corpora, [name], [1.0], 30, **options).datasets[0]
    batch = data.draw(st.integers(1, 10))
    dest = numpy.array(
        data.draw(st.permutations(range(batch)))[: data.draw(st.integers(0, batch))],
        dtype=numpy.int64,
    )
    valid = st.one_of(st.just(-1), st.integers(0, len(dataset) - 1))  # -1: padding
    wrong = st.sampled_from([-3, -2, len(dataset), len(dataset) + 5])
    position = st.one_of(valid, wrong) if data.draw(st.booleans()) else valid
    positions = numpy.array(
        data.draw(st.lists(position, min_size=len(dest), max_size=len(dest))), dtype=numpy.int64
    )
    seq = dataset.config.sequence_length
    got, want = allocate_batch(batch, seq), allocate_batch(batch, seq)
    for a, b in zip(got.values(), want.values()):
        a.fill(9)
        b.fill(9)
    bad = [int(p) for p in positions if not -1 <= p < len(dataset)]
    if bad:  # both paths name the first bad position, neither serves a sample for it
        with pytest.raises(SampleIndexError, match=f"sample index {bad[0]} out of range"):
            fill_rows(dataset, positions, dest, got)
        monkeypatch.setenv("TOKENLOOM_DISABLE_NUMBA", "1")
        with pytest.raises(SampleIndexError, match=f"sample index {bad[0]} out of range"):
            reference_rows(readable, positions, dest, want)
        return
    fill_rows(dataset, positions, dest, got)
    monkeypatch.setenv("TOKENLOOM_DISABLE_NUMBA", "1")
    reference_rows(readable, positions, dest, want)
    for field in BATCH_FIELDS:
        numpy.testing.assert_array_equal(got[field], want[field], err_msg=field)


@pytest.mark.parametrize("numba", [True, False])
def test_out_of_range_indices_are_a_clear_tokenloom_error(corpora, monkeypatch, numba):
    monkeypatch.setenv("TOKENLOOM_DISABLE_NUMBA", "0" if numba else "1")
    blend = _blend(corpora, ["uint8", "int32"], [1.0, 2.0], 20)
    for bad in (20, 21, -21, 10**12):
        with pytest.raises(
            SampleIndexError, match=f"sample index {bad} out of range for 20 blended samples"
        ) as info:
            blend.get_batch([0, None, bad])
        assert isinstance(info.value, IndexError) and isinstance(info.value, TokenloomError)
        with pytest.raises(SampleIndexError, match="out of range for 20 blended samples"):
            blend[bad]
    with pytest.raises(TypeError, match="integer"):
        blend.get_batch([0, 1.5])
    part = blend.datasets[1]
    out = allocate_batch(2, blend.config.sequence_length)
    with pytest.raises(SampleIndexError, match=f"out of range for {len(part)} samples"):
        fill_rows(
            part,
            numpy.array([0, len(part)], dtype=numpy.int64),
            numpy.array([0, 1], dtype=numpy.int64),
            out,
        )


def test_empty_index_list_gives_empty_arrays(corpora):
    blend = _blend(corpora, ["uint16", "uint8"], [1.0, 1.0], 10)
    batch = blend.get_batch([])
    assert batch["tokens"].shape == (0, blend.config.sequence_length)
    assert batch["dataset_id"].shape == (0,) and batch["dataset_id"].dtype == numpy.int16


ATTRIBUTION = ("document_ranges", "document_range_counts", "tokens_per_source")


@settings(max_examples=40, deadline=None, suppress_health_check=SUPPRESS)
@given(names=NAMES, options=OPTIONS, size=st.integers(1, 60), data=st.data())
def test_attribution_kernel_equals_its_readable_twin(
    corpora, monkeypatch, names, options, size, data
):
    """``return_document_ranges``: the batch kernel's ranges, counts and per-source
    tokens (written in the pass that copies the tokens) equal the readable path's
    (``fill_reference``: ``sample_ranges`` and ``count_nonzero`` of the loss mask), for
    any blend, rules, padding samples and batch (the empty one included)."""
    pytest.importorskip("numba")
    weights = [1.0] * len(names)
    options = {**options, "return_document_ranges": True}
    monkeypatch.setenv("TOKENLOOM_DISABLE_NUMBA", "1")
    readable = _blend(corpora, names, weights, size, **options)
    position = st.one_of(st.none(), st.integers(-len(readable), len(readable) - 1))
    indices = data.draw(st.lists(position, min_size=0, max_size=12))
    want = readable.get_batch(indices)
    monkeypatch.setenv("TOKENLOOM_DISABLE_NUMBA", "0")
    got = _blend(corpora, names, weights, size, **options).get_batch(indices)
    assert sorted(got) == sorted(want) and set(ATTRIBUTION) <= set(got)
    for name, value in want.items():
        assert got[name].dtype == value.dtype and got[name].shape == value.shape, name
        numpy.testing.assert_array_equal(got[name], value, err_msg=name)
    assert want["document_range_counts"].dtype == numpy.int64
    numpy.testing.assert_array_equal(  # loss-bearing tokens, counted from the mask
        numpy.bincount(
            want["dataset_id"].astype(numpy.int64),
            weights=numpy.count_nonzero(want["loss_mask"], axis=1),
            minlength=len(names),
        ),
        want["tokens_per_source"],
    )

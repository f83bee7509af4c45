"""GPTDataset behaviour beyond the golden cases: errors, padding, pad ids, readers,
cu_seqlens, pickling, and samples equal to a literal re-statement of megatron-core."""

from __future__ import annotations

import pickle
import warnings

import numpy
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.support.dataset_files import (
    GOLDEN_DIR,
    golden_case,
    golden_config,
    small_config,
    split_indices,
    write_corpus,
)

from tokenloom.datasets import GPTDataset, MockGPTDataset, Split
from tokenloom.datasets.masks import reference_ltor_masks_and_position_ids
from tokenloom.errors import ConfigError

requires_golden = pytest.mark.skipif(
    not (GOLDEN_DIR / "manifest.json").is_file(), reason="golden vectors not found"
)


def megatron_sample(ds, idx):
    """megatron-core's __getitem__, restated step by step with the low-level get()."""
    config, extra, pad = ds.config, int(ds.config.add_extra_token_to_sequence), ds._pad_token_id
    j = int(ds.shuffle_index[0 if idx is None else idx])
    (b, ob), (e, oe) = ds.sample_index[j], ds.sample_index[j + 1]
    if b == e:
        parts = [
            ds.dataset.get(int(ds.document_index[b]), offset=int(ob), length=int(oe - ob + extra))
        ]
    else:
        parts = [
            ds.dataset.get(
                int(ds.document_index[i]),
                offset=int(ob if i == b else 0),
                length=None if i < e else int(oe + extra),
            )
            for i in range(b, e + 1)
        ]
    length = sum(map(len, parts))
    parts.append([pad] * (config.sequence_length + extra - length))
    text = numpy.concatenate(parts).astype(numpy.int64)
    if extra:
        tokens, labels = text[:-1].copy(), text[1:].copy()
    else:
        tokens, labels = text.copy(), numpy.roll(text, -1)
        labels[-1] = pad
    attention, loss_mask, positions = reference_ltor_masks_and_position_ids(
        tokens,
        config.tokenizer.eod,
        config.reset_position_ids,
        config.reset_attention_mask,
        config.eod_mask_loss,
        config.create_attention_mask,
    )
    loss_mask[labels == pad] = 0.0
    tokens[tokens == pad] = 0
    labels[labels == pad] = 0
    if idx is None:
        loss_mask[:] = 0.0
    sample = {"tokens": tokens, "labels": labels, "loss_mask": loss_mask, "position_ids": positions}
    if config.create_attention_mask:
        sample["attention_mask"] = attention
    return sample


def assert_same_sample(actual, expected):
    assert set(expected) <= set(actual)
    for name, value in expected.items():
        assert actual[name].dtype == value.dtype, name
        numpy.testing.assert_array_equal(actual[name], value, err_msg=name)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    rng = numpy.random.default_rng(3)
    lengths = rng.integers(2, 40, 60)
    return write_corpus(tmp_path_factory.mktemp("corpus") / "c", lengths, seed=3, vocab=50)


def make(corpus, cache, split=Split.train, num_samples=30, **overrides):
    config = small_config(corpus, cache, **overrides)
    low = GPTDataset.build_low_level_dataset(corpus, config)
    return GPTDataset(
        low, corpus, split_indices(config, split, len(low)), num_samples, split, config
    )


@requires_golden
@pytest.mark.timeout(60)
@pytest.mark.parametrize("size", [3, None])
def test_split_without_documents_fails_fast(tmp_path, size):
    """split '949,50,1' on the 300-document c0: megatron-core loops forever for 3 samples."""
    config = golden_config(golden_case("single_basic"), path_to_cache=tmp_path, split="949,50,1")
    low = GPTDataset.build_low_level_dataset(config.blend[0][0], config)
    indices = split_indices(config, Split.test, len(low))
    assert indices.size == 0
    with pytest.raises(ConfigError, match=r"test split .*\[300, 300\).* 0 documents"):
        GPTDataset(low, config.blend[0][0], indices, size, Split.test, config)
    assert not list(tmp_path.iterdir())


FLAG_SETS = [
    dict(),
    dict(reset_position_ids=True, reset_attention_mask=True, eod_mask_loss=True),
    dict(add_extra_token_to_sequence=False, create_attention_mask=False),
    dict(eod_mask_loss=True, create_attention_mask=False, reset_position_ids=True),
]


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    flags=st.sampled_from(FLAG_SETS),
    split=st.sampled_from(list(Split)),
    seq=st.integers(2, 50),
    num_samples=st.sampled_from([None, 1, 17, 90]),
    drop_last=st.booleans(),
    data=st.data(),
)
def test_samples_equal_megatron_restatement(
    corpus, tmp_path, flags, split, seq, num_samples, drop_last, data
):
    ds = make(
        corpus,
        tmp_path,
        split,
        num_samples,
        sequence_length=seq,
        drop_last_partial_validation_sequence=drop_last,
        **flags,
    )
    assert len(ds) >= (num_samples or 0)
    for idx in data.draw(st.lists(st.integers(0, len(ds) - 1), min_size=1, max_size=5)) + [None]:
        assert_same_sample(ds[idx], megatron_sample(ds, idx))


def test_padding_sample_and_index_errors(corpus, tmp_path):
    ds = make(corpus, tmp_path)
    padded, first = ds[None], ds[0]
    numpy.testing.assert_array_equal(padded["tokens"], first["tokens"])
    assert not padded["loss_mask"].any() and first["loss_mask"].all()
    numpy.testing.assert_array_equal(ds[-1]["tokens"], ds[len(ds) - 1]["tokens"])
    with pytest.raises(IndexError):
        ds[len(ds)]
    with pytest.raises(TypeError):
        ds["0"]


def test_samples_are_independent_copies(corpus, tmp_path):
    ds = make(corpus, tmp_path)
    sample = ds[0]
    sample["tokens"][:] = -5
    sample["loss_mask"][:] = 0
    sample["position_ids"][:] = 0
    again = ds[0]
    assert (again["tokens"] != -5).all() and again["loss_mask"].all()
    assert again["position_ids"].tolist() == list(range(16))
    with pytest.raises(ValueError):  # the shared causal mask is read-only
        again["attention_mask"][0, 0, 0] = True


def test_real_pad_token_is_masked(tmp_path):
    prefix = write_corpus(tmp_path / "p", [30, 25, 40, 33], seed=1, vocab=12)
    config = small_config(
        prefix,
        tmp_path / "cache",
        tokenizer={"vocab_size": 12, "eod": 2, "pad": 7},
        split="100,0,0",
    )
    low = GPTDataset.build_low_level_dataset(prefix, config)
    ds = GPTDataset(low, prefix, numpy.arange(4, dtype=numpy.int32), 5, Split.train, config)
    assert ds._pad_token_id == 7
    seen = False
    for k in range(len(ds)):
        sample = ds[k]
        assert_same_sample(sample, megatron_sample(ds, k))
        assert not (sample["tokens"] == 7).any() and not (sample["labels"] == 7).any()
        seen |= not sample["loss_mask"].all()
    assert seen, "the corpus contains token 7, whose loss must be masked"


def test_pad_colliding_with_eod_falls_back_to_minus_one(tmp_path, corpus):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ds = make(corpus, tmp_path, tokenizer={"vocab_size": 50, "eod": 2, "pad": 2})
    assert ds._pad_token_id == -1 and any("collides" in str(w.message) for w in caught)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = make(
            corpus,
            tmp_path,
            tokenizer={"vocab_size": 50, "eod": 2, "pad": 2},
            allow_ambiguous_pad_tokens=True,
        )
    assert ds._pad_token_id == 2
    assert_same_sample(ds[3], megatron_sample(ds, 3))


def test_file_pointer_reader_gives_the_same_samples(corpus, tmp_path):
    mmapped = make(corpus, tmp_path, reset_position_ids=True)
    pointer = make(corpus, tmp_path, reset_position_ids=True, mmap_bin_files=False)
    assert pointer.dataset.tokens is None
    for k in range(len(mmapped)):
        assert_same_sample(pointer[k], mmapped[k])


def test_cu_seqlens_mark_document_boundaries(corpus, tmp_path):
    ds = make(
        corpus,
        tmp_path,
        return_cu_seqlens=True,
        split=Split.valid,
        drop_last_partial_validation_sequence=False,
        num_samples=None,
    )
    for k in range(len(ds)):
        sample = ds[k]
        cu, tokens = sample["cu_seqlens"], megatron_sample(ds, k)["tokens"]
        assert cu.dtype == numpy.int32 and cu[0] == 0 and cu[-1] == 16
        assert (numpy.diff(cu) > 0).all() and int(sample["max_seqlen"]) == numpy.diff(cu).max()
        eods = numpy.flatnonzero(tokens[:-1] == 2) + 1  # every document ends with EOD
        data_end = int((sample["loss_mask"] > 0).sum()) + 1 if k == len(ds) - 1 else 16
        expected = sorted(set(eods.tolist()) | ({data_end} if data_end < 16 else set()))
        assert cu[1:-1].tolist() == expected


def test_pickle_round_trip(corpus, tmp_path):
    ds = make(corpus, tmp_path, reset_attention_mask=True)
    clone = pickle.loads(pickle.dumps(ds))
    assert not clone.indices_loaded  # cached indices are re-mmapped in the worker
    for k in (0, 5, len(ds) - 1):
        assert_same_sample(clone[k], ds[k])
    numpy.testing.assert_array_equal(clone.sample_index, ds.sample_index)


def test_constructor_argument_errors(corpus, tmp_path):
    config = small_config(corpus, tmp_path)
    low = GPTDataset.build_low_level_dataset(corpus, config)
    good = numpy.arange(10, dtype=numpy.int32)
    bad = [
        (dict(indexed_indices=numpy.arange(55, 70)), "60 sequences"),
        (dict(indexed_indices=numpy.zeros((2, 2), dtype=int)), "1-D integer"),
        (dict(num_samples=-1), "num_samples"),
        (dict(index_split="train"), "Split member"),
        (dict(config=object()), "GPTDatasetConfig"),
    ]
    for change, message in bad:
        args = dict(
            indexed_dataset=low,
            dataset_path=corpus,
            indexed_indices=good,
            num_samples=4,
            index_split=Split.train,
            config=config,
        )
        args.update(change)
        with pytest.raises(ConfigError, match=message):
            GPTDataset(**args)
    with pytest.raises(ConfigError, match="mock config"):
        MockGPTDataset(low, None, good, 4, Split.train, config)


def test_megatron_identifiers(corpus, tmp_path):
    ds = make(corpus, tmp_path)
    assert list(ds.unique_identifiers) == [
        "class",
        "dataset_path",
        "num_samples",
        "index_split",
        "random_seed",
        "sequence_length",
        "split",
        "split_matrix",
        "tokenizer",
    ]
    assert len(ds.unique_description_hash) == 32
    extra = list(ds.cache_identifiers)[len(ds.unique_identifiers) :]
    assert extra == [
        "add_extra_token_to_sequence",
        "drop_last_partial_sequence",
        "sequence_count",
        "data",
    ]
    assert GPTDataset.numel_low_level_dataset(ds.dataset) == 60


def test_sequences_per_dataset_reaches_the_reader(corpus, tmp_path):
    import json

    from tokenloom.errors import FormatError

    path = tmp_path / "spd.json"
    path.write_text(json.dumps({corpus: [60, 61]}))
    config = small_config(corpus, tmp_path, sequences_per_dataset=str(path))
    low = GPTDataset.build_low_level_dataset(corpus, config)
    assert low.sequences_per_dataset == (60, 61) and len(low) == 60
    wrong = small_config(corpus, tmp_path, sequences_per_dataset={corpus: [59, 60]})
    with pytest.raises(FormatError):
        GPTDataset.build_low_level_dataset(corpus, wrong)

"""Warm builds write each GPT cache description piece by piece (``GPTDataset._cache_key``);
the text must be exactly ``describe(cache_identifiers)``, so that a cache is reused
exactly when the full key would reuse it, for every input that shapes the indices."""

from __future__ import annotations

import os
import pickle
from collections import OrderedDict

import pytest
from tests.support.startup_blend import build

from tokenloom.builder import memo as startup_memo
from tokenloom.cache import CacheKey, describe, file_identity, json_scalar
from tokenloom.format import IndexedDataset, LazyIndexedDataset

pytestmark = pytest.mark.usefixtures("no_racy_window")


class PlainTokenizer:
    """A tokenizer without ``unique_identifiers`` (keyed by its summary)."""

    vocab_size, eod, pad = 32000, 0, None


CONFIGS = [
    {},
    {"add_extra_token_to_sequence": False},
    {"sequence_length": 17, "random_seed": 11},
    {"split": "90,10,0", "drop_last_partial_validation_sequence": False},
    {"split": "80,10,10"},
    {"tokenizer": PlainTokenizer()},
]


@pytest.mark.parametrize("fields", CONFIGS)
def test_warm_description_is_the_full_description(corpora, tmp_path, fields):  # noqa: F811
    build(corpora, tmp_path / "cache", **fields)
    warm = build(corpora, tmp_path / "cache", **fields)
    for dataset in warm.datasets:
        assert isinstance(dataset.dataset, LazyIndexedDataset)  # the fast path ran
        key = dataset.cache_key
        full = CacheKey(key.class_name, key.split_name, dataset.cache_identifiers)
        assert key.description == full.description and key.hash == full.hash
        assert dict(key.identifiers) == json_roundtrip(dataset.cache_identifiers)
        assert pickle.loads(pickle.dumps(key)).description == key.description
        assert dataset.cached_indices.expected_length is not None  # reused the cold entry


def json_roundtrip(identifiers):
    import json

    return json.loads(describe(identifiers), object_pairs_hook=OrderedDict)


def test_every_shaping_input_changes_the_warm_key(corpora, tmp_path):  # noqa: F811
    def stems(**fields):
        return [d.cache_key.stem for d in build(corpora, tmp_path / "cache", **fields).datasets]

    stems()
    base = stems()
    for fields in CONFIGS[1:]:
        assert not set(stems(**fields)) & set(base), fields
    os.utime(corpora[0] + ".bin", ns=(1, 1))  # the .bin identity is part of the key
    changed = stems()
    assert changed[0] != base[0] and changed[1:] == base[1:]


def test_file_identity_json_matches(corpora, tmp_path):  # noqa: F811
    from tokenloom.builder.startup import Startup, identity_json
    from tokenloom.datasets import GPTDataset, GPTDatasetConfig, SimpleTokenizer

    config = GPTDatasetConfig(
        random_seed=1,
        sequence_length=8,
        split="100,0,0",
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        tokenizer=SimpleTokenizer(100, 0),
        blend=([corpora[1]], None),
        path_to_cache=str(tmp_path / "cache"),
    )
    startup = Startup(startup_memo.StartupMemo(str(tmp_path / "memo.json")), config, True)
    for opened in (
        startup.open(GPTDataset, corpora[1]),  # a small .idx: read in one call
        LazyIndexedDataset(startup.memo.facts(corpora[1]), opened=IndexedDataset(corpora[1])),
    ):
        facts = opened.facts
        assert facts.file_identity() == file_identity(corpora[1])
        assert identity_json(facts) == describe(file_identity(corpora[1]))
        assert opened.file_identity() == IndexedDataset(corpora[1]).file_identity()


@pytest.mark.parametrize(
    "prefix",
    ["a/b", "a//b", "./a/../b", "b", "a/b/", "a/.", "a/..", "/x/y", "/", "a/b.c", "..", "."],
)
def test_idx_path_from_the_absolute_prefix(prefix):
    expected = os.path.abspath(prefix + ".idx")
    assert startup_memo.idx_path(prefix, os.path.abspath(prefix)) == expected
    assert startup_memo.idx_path(prefix, None) == expected


@pytest.mark.parametrize(
    "path",
    [
        "/a/b",
        "/a//b",
        "//a",
        "/a/./b",
        "/a/../b",
        "/a/.x/b",
        "/a/b/",
        "/",
        "/a/b.",
        "a/b",
        "/a/b/..",
    ],
)
def test_absolute_prefixes_are_their_own_abspath(path):
    from tokenloom.builder.startup import _absolute

    assert _absolute(path) == os.path.abspath(path)


@pytest.mark.parametrize(
    "value", ['p\u00e9"\\\n', "", 0, -3, 10**30, None, True, 1.5, [1, "x"], {"a": None}]
)
def test_json_scalar_is_describe(value):
    assert json_scalar(value) == describe(value)


def test_valid_split_keys_follow_drop_last_partial_validation_sequence(corpora, tmp_path):  # noqa: F811
    from tests.support.random_corpora import EOD

    from tokenloom.builder import BlendedMegatronDatasetBuilder
    from tokenloom.datasets import GPTDataset, GPTDatasetConfig, SimpleTokenizer

    def splits(drop):
        config = GPTDatasetConfig(
            random_seed=3,
            sequence_length=24,
            reset_position_ids=False,
            reset_attention_mask=False,
            eod_mask_loss=False,
            split="80,20,0",
            tokenizer=SimpleTokenizer(32000, EOD),
            path_to_cache=str(tmp_path / "cache"),
            blend=(list(corpora), [4.0, 3.0, 2.0, 1.0]),
            mid_level_dataset_surplus=0.05,
            drop_last_partial_validation_sequence=drop,
        )
        built = BlendedMegatronDatasetBuilder(
            GPTDataset, [100, 20, 0], lambda: True, config
        ).build()
        return [d for blend in built[:2] for d in blend.datasets]

    for drop in (True, False):
        splits(drop)
        warm = splits(drop)
        assert {d.index_split.name for d in warm} == {"train", "valid"}
        for dataset in warm:
            assert isinstance(dataset.dataset, LazyIndexedDataset)
            assert dataset.cache_key.description == describe(dataset.cache_identifiers)
    valid = [
        {d.cache_key.stem for d in splits(drop) if d.index_split.name == "valid"}
        for drop in (True, False)
    ]
    assert not valid[0] & valid[1]


def test_tokenizer_changed_in_place_changes_the_key(corpora, tmp_path):  # noqa: F811
    """The config part of the description is remembered between datasets; a tokenizer
    whose identity is edited in place must still give new keys (compared by value)."""
    tokenizer = PlainTokenizer()
    tokenizer.unique_identifiers = OrderedDict([("class", "PlainTokenizer"), ("merges", 1)])
    first = [
        d.cache_key.stem for d in build(corpora, tmp_path / "cache", tokenizer=tokenizer).datasets
    ]
    tokenizer.unique_identifiers["merges"] = 2
    warm = build(corpora, tmp_path / "cache", tokenizer=tokenizer)
    assert not set(d.cache_key.stem for d in warm.datasets) & set(first)
    for dataset in warm.datasets:
        full = CacheKey("GPTDataset", "train", dataset.cache_identifiers)
        assert dataset.cache_key.description == full.description

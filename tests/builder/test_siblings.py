"""The builder makes the GPT datasets of a blend's prefixes as ``sibling``\\ s of each
split's first one: every attribute must equal what a full construction gives, and
anything the copy does not know about is constructed in full."""

from __future__ import annotations

import numpy
import pytest
from tests.support.startup_blend import build

from tokenloom.datasets import GPTDataset
from tokenloom.datasets._gpt_sibling import INIT_ATTRIBUTES, PER_PREFIX
from tokenloom.format import LazyIndexedDataset

pytestmark = pytest.mark.usefixtures("no_racy_window")

CONFIGS = [{}, {"split": "80,10,10", "drop_last_partial_validation_sequence": False}]


def _full(dataset, **keywords):
    return GPTDataset(
        dataset.dataset,
        dataset.dataset_path,
        dataset.indices,
        dataset.num_samples,
        dataset.index_split,
        dataset.config,
        **keywords,
    )


def _same(sibling, full):
    assert vars(sibling).keys() == vars(full).keys() == INIT_ATTRIBUTES
    for name in INIT_ATTRIBUTES - PER_PREFIX:
        assert getattr(sibling, name) == getattr(full, name), name
    assert sibling.dataset is full.dataset
    assert sibling.dataset_path == full.dataset_path
    assert numpy.array_equal(sibling.indices, full.indices)
    assert sibling.indices.dtype == full.indices.dtype
    assert sibling.num_samples == full.num_samples
    assert sibling.unique_identifiers == full.unique_identifiers
    assert list(sibling.unique_identifiers) == list(full.unique_identifiers)
    assert sibling.cache_key.description == full.cache_key.description
    assert sibling.cached_indices.checks == full.cached_indices.checks
    assert len(sibling) == len(full)
    for i in (0, len(full) - 1):
        got, expected = sibling[i], full[i]
        assert got.keys() == expected.keys()
        for name in got:
            assert numpy.array_equal(got[name], expected[name]), name


@pytest.mark.parametrize("fields", CONFIGS)
@pytest.mark.parametrize("warm", [False, True])
def test_siblings_equal_full_constructions(corpora, tmp_path, fields, warm, monkeypatch):
    if warm:
        build(corpora, tmp_path / "cache", **fields)
    made = []
    sibling = GPTDataset.sibling

    def counting(self, *args, **kwargs):
        made.append(self.index_split)
        return sibling(self, *args, **kwargs)

    monkeypatch.setattr(GPTDataset, "sibling", counting)
    blends = build(corpora, tmp_path / "cache", **fields)
    assert made.count(blends.datasets[0].index_split) == len(corpora) - 1  # all but the first
    for dataset in blends.datasets:
        assert isinstance(dataset.dataset, LazyIndexedDataset)  # the start-up path ran
        _same(dataset, _full(dataset, index_cache=dataset.cache))


def test_sibling_keeps_the_checks_of_init(corpora, tmp_path):
    first = build(corpora, tmp_path / "cache").datasets[0]
    other = build(corpora, tmp_path / "cache").datasets[1]
    with pytest.raises(Exception, match="indexed_indices reach"):
        first.sibling(other.dataset, other.dataset_path, numpy.arange(10**6), 5)
    with pytest.raises(Exception, match="num_samples"):
        first.sibling(other.dataset, other.dataset_path, other.indices, -1)


class Subclass(GPTDataset):
    """A subclass: its siblings are constructed in full (its __init__ runs)."""

    made = 0

    def __init__(self, *args, **kwargs):
        type(self).made += 1
        super().__init__(*args, **kwargs)


def test_subclasses_and_unknown_attributes_are_constructed_in_full(corpora, tmp_path):
    blend = build(corpora, tmp_path / "cache")
    first, other = blend.datasets[0], blend.datasets[1]
    sub = Subclass(
        first.dataset,
        first.dataset_path,
        first.indices,
        first.num_samples,
        first.index_split,
        first.config,
    )
    made = Subclass.made
    copy = sub.sibling(other.dataset, other.dataset_path, other.indices, other.num_samples)
    assert type(copy) is Subclass and Subclass.made == made + 1
    first.extra = "a later attribute"  # the copy does not know it: full construction
    copy = first.sibling(other.dataset, other.dataset_path, other.indices, other.num_samples)
    assert "extra" not in vars(copy) and vars(copy).keys() == INIT_ATTRIBUTES

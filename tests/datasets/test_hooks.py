"""megatron-core's GPTDataset hooks (``tokenloom.datasets._hooks``), called as megatron-core
calls them when a subclass overrides them; tokenloom's own fast paths otherwise."""

from __future__ import annotations

import numpy
import pytest
from tests.support.dataset_files import small_config, split_indices, write_corpus

from tokenloom.datasets import GPTDataset, Split


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    lengths = numpy.random.default_rng(11).integers(2, 40, 60)
    return write_corpus(tmp_path_factory.mktemp("corpus") / "c", lengths, seed=11, vocab=50)


def build(cls, corpus, cache, num_samples=30):
    config = small_config(corpus, cache)
    low = cls.build_low_level_dataset(corpus, config)
    return cls(
        low, corpus, split_indices(config, Split.train, len(low)), num_samples, Split.train, config
    )


class Reversed(GPTDataset):
    """Overrides the sample hook; returns Megatron-LM main's three items."""

    calls: list

    def _query_document_sample_shuffle_indices(self, idx):
        self.calls.append(idx)
        tokens, documents = super()._query_document_sample_shuffle_indices(idx)
        return tokens[::-1].copy(), documents, [len(tokens)]


def test_the_sample_hook_is_called_for_every_sample_and_every_batch_row(corpus, tmp_path):
    plain = build(GPTDataset, corpus, tmp_path / "a")
    Reversed.calls = []
    hooked = build(Reversed, corpus, tmp_path / "b")
    assert not GPTDataset.samples_by_hook() and Reversed.samples_by_hook()
    for i in (0, 3, None):
        tokens, _ = plain._query_document_sample_shuffle_indices(0 if i is None else i)
        assert hooked[i]["tokens"].tolist() == tokens[::-1][:-1].tolist()
    assert Reversed.calls == [0, 3, 0]
    batch = hooked.get_batch([1, 2])  # the batch kernel steps aside: rows are hooked[i]
    assert batch["tokens"].tolist() == [hooked[1]["tokens"].tolist(), hooked[2]["tokens"].tolist()]
    assert plain[0]["tokens"].tolist() != hooked[0]["tokens"].tolist()


def test_the_default_hook_gives_megatrons_tokens_and_documents(corpus, tmp_path):
    dataset = build(GPTDataset, corpus, tmp_path)
    tokens, documents = dataset._query_document_sample_shuffle_indices(4)
    assert tokens.dtype == numpy.int64 and tokens.shape == (17,)
    assert documents.dtype == numpy.int64
    sample = dataset[4]
    assert sample["tokens"].tolist() == tokens[:-1].tolist()
    assert sample["labels"].tolist() == tokens[1:].tolist()


class OwnIndices(GPTDataset):
    """Builds its indices itself (called once, in __init__, as megatron-core does)."""

    built = 0

    def _build_document_sample_shuffle_indices(self):
        type(self).built += 1
        document_index, sample_index, shuffle_index = (
            super()._build_document_sample_shuffle_indices()
        )
        return document_index, sample_index, shuffle_index[::-1].copy()


def test_an_overridden_index_build_is_called_once_and_served(corpus, tmp_path):
    plain = build(GPTDataset, corpus, tmp_path / "a")
    own = build(OwnIndices, corpus, tmp_path / "b")
    assert OwnIndices.built == 1
    assert own.shuffle_index.tolist() == plain.shuffle_index.tolist()[::-1]
    assert own[0]["tokens"].tolist() == plain[len(plain) - 1]["tokens"].tolist()


def test_an_assigned_index_array_is_served(corpus, tmp_path):
    dataset = build(GPTDataset, corpus, tmp_path)
    last = dataset[len(dataset) - 1]["tokens"].tolist()
    dataset.shuffle_index = dataset.shuffle_index[::-1].copy()
    assert dataset[0]["tokens"].tolist() == last


class TwoEpochs(GPTDataset):
    """Sizes the epochs itself (always at least two)."""

    def _get_num_epochs(self, num_tokens_per_epoch):
        return max(2, super()._get_num_epochs(num_tokens_per_epoch))


def test_overridden_epoch_sizing_shapes_the_indices(corpus, tmp_path):
    plain = build(GPTDataset, corpus, tmp_path / "a", num_samples=None)
    two = build(TwoEpochs, corpus, tmp_path / "b", num_samples=None)
    documents = plain.indices.shape[0]
    assert plain.document_index.shape[0] == documents
    assert two.document_index.shape[0] == 2 * documents
    assert len(two) > len(plain)

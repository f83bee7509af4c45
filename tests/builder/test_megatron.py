"""BlendedMegatronDatasetBuilder: every configuration case and every bad config."""

from __future__ import annotations

import json

import numpy
import pytest
from tests.support.random_corpora import EOD, write_corpus

from tokenloom.builder import BlendedMegatronDatasetBuilder, get_size_per_split_per_dataset
from tokenloom.cli.main import main as cli_main
from tokenloom.datasets import GPTDataset, GPTDatasetConfig, MockGPTDataset, SimpleTokenizer
from tokenloom.datasets.blended import BlendedDataset
from tokenloom.errors import ConfigError, FormatError


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpora")
    return [write_corpus(root / f"c{i}", n, seed=10 + i) for i, n in enumerate((90, 50, 30))]


def config(tmp_path, **fields) -> GPTDatasetConfig:
    base = dict(
        random_seed=5,
        sequence_length=24,
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        tokenizer=SimpleTokenizer(32000, EOD),
        path_to_cache=str(tmp_path / "cache"),
    )
    base.update(fields)
    return GPTDatasetConfig(**base)


def build(tmp_path, sizes, cls=GPTDataset, **fields):
    return BlendedMegatronDatasetBuilder(
        cls, sizes, lambda: True, config(tmp_path, **fields)
    ).build()


def same_samples(a, b, ks=(0, 1, -1)) -> bool:
    return len(a) == len(b) and all(numpy.array_equal(a[k]["tokens"], b[k]["tokens"]) for k in ks)


def test_single_prefix_gives_plain_datasets_and_none_for_empty_splits(corpora, tmp_path):
    train, valid, test = build(
        tmp_path, [100, 10, None], blend=([corpora[0]], None), split="90,10,0"
    )
    assert type(train) is GPTDataset and type(valid) is GPTDataset and test is None
    assert len(train) >= 100 and train.num_samples == 100
    assert numpy.array_equal(numpy.unique(train.document_index), numpy.arange(81))


def test_weighted_blend_sizes_mid_level_datasets_with_the_surplus(corpora, tmp_path):
    weights = [0.5, 0.3, 0.2]
    train, valid, test = build(
        tmp_path,
        [200, 20, 10],
        blend=(corpora, weights),
        split="80,10,10",
        mid_level_dataset_surplus=0.25,
    )
    for split, dataset, size in ((0, train, 200), (1, valid, 20), (2, test, 10)):
        assert isinstance(dataset, BlendedDataset)
        target = get_size_per_split_per_dataset(weights, [200, 20, 10])
        assert len(dataset) == sum(t[split] for t in target) >= size
        wanted = [int(numpy.ceil(numpy.ceil(size * w) * 1.25)) for w in weights]
        assert [d.num_samples for d in dataset.datasets] == wanted


def test_unweighted_blend_is_capped_at_the_total(corpora, tmp_path):
    train, valid, _ = build(tmp_path, [10**6, 5, None], blend=(corpora, None), split="90,10,0")
    lengths = [len(d) for d in train.datasets]
    assert [d.num_samples for d in train.datasets] == [None] * 3
    assert len(train) == sum(lengths) and train.weights == pytest.approx(
        list(numpy.array(lengths) / sum(lengths))
    )
    assert len(valid) == 5


def test_exhaustive_blend_without_sizes(corpora, tmp_path):
    train, valid, test = build(tmp_path, [None, None, None], blend=(corpora, None), split="90,10,0")
    assert test is None and train.size is None
    assert train.weights == [len(d) for d in train.datasets] and len(train) == sum(train.weights)


def test_weighted_single_prefix_still_blends(corpora, tmp_path):
    train, _, _ = build(tmp_path, [50, 5, 5], blend=([corpora[1]], [1.0]), split="8,1,1")
    assert isinstance(train, BlendedDataset) and len(train.datasets) == 1 and len(train) == 50


def test_blend_per_split_and_multiple_validation_sets(corpora, tmp_path):
    per_split = [(corpora[:2], [0.6, 0.4]), (corpora, None), ([corpora[2]], None)]
    train, valid, test = build(
        tmp_path,
        [60, None, 7],
        blend_per_split=per_split,
        multiple_validation_sets=True,
        full_validation=True,
    )
    assert isinstance(train, BlendedDataset) and len(train) == 60
    assert isinstance(valid, list) and len(valid) == 3
    for prefix, dataset in zip(corpora, valid):
        alone = build(tmp_path, [0, None, 0], blend_per_split=[None, ([prefix], None), None])[1]
        assert type(dataset) is GPTDataset and same_samples(dataset, alone)
    assert type(test) is GPTDataset and len(test) >= 7
    assert build(tmp_path, [1, None, None], blend_per_split=[([corpora[0]], None), None, None])[
        1:
    ] == [None, None]


def test_mock_without_blend(tmp_path):
    train, valid, test = build(tmp_path, [5, 2, 1], cls=MockGPTDataset, sequence_length=16)
    assert all(type(d) is MockGPTDataset for d in (train, valid, test))
    assert train[0]["tokens"].shape == (16,)
    again = build(tmp_path, [5, 2, 1], cls=GPTDataset, sequence_length=16)
    assert type(again[0]) is MockGPTDataset and same_samples(again[0], train)


def test_sequences_per_dataset_from_the_cli_gives_the_same_datasets(corpora, tmp_path):
    seqs = tmp_path / "seqs.json"
    assert (
        cli_main(["build-sequences-per-dataset", "--no-progress", *corpora, "-o", str(seqs)]) == 0
    )
    plain = build(tmp_path / "a", [80, 8, 2], blend=(corpora, [3, 2, 1]), split="80,10,10")
    counted = build(
        tmp_path / "b",
        [80, 8, 2],
        blend=(corpora, [3, 2, 1]),
        split="80,10,10",
        sequences_per_dataset=json.loads(seqs.read_text()),
    )
    for a, b in zip(plain, counted):
        assert numpy.array_equal(a.dataset_index, b.dataset_index) and same_samples(a, b)


@pytest.mark.parametrize(
    "sizes, message",
    [
        ([10, 10], "one size per split"),
        ("abc", "one size per split"),
        ([10, -1, None], r"sizes\[valid\]=-1"),
        ([10, 1.5, None], r"sizes\[valid\]=1.5"),
        ([10, True, None], r"sizes\[valid\]=True"),
    ],
)
def test_bad_sizes(corpora, tmp_path, sizes, message):
    with pytest.raises(ConfigError, match=message):
        build(tmp_path, sizes, blend=(corpora, None), split="90,10,0")


def test_weights_need_sizes(corpora, tmp_path):
    with pytest.raises(ConfigError, match="the test split has blend weights"):
        build(tmp_path, [10, 10, None], blend=(corpora, [1, 1, 1]), split="90,10,0")
    with pytest.raises(ConfigError, match="the valid split has blend weights"):
        build(
            tmp_path,
            [10, None, None],
            blend_per_split=[None, (corpora, [1, 2, 3]), None],
            multiple_validation_sets=True,
        )


def test_full_validation_needs_no_valid_size(corpora, tmp_path):
    with pytest.raises(ConfigError, match="full_validation"):
        build(
            tmp_path,
            [0, 5, 0],
            blend_per_split=[None, (corpora, None), None],
            multiple_validation_sets=True,
            full_validation=True,
        )


@pytest.mark.timeout(60)
def test_empty_split_fails_fast_instead_of_looping(corpora, tmp_path):
    with pytest.raises(ConfigError, match="test"):
        build(tmp_path, [100, 10, 3], blend=([corpora[0]], None), split="949,50,1")


def test_surplus_arithmetic_matches_megatron():
    assert get_size_per_split_per_dataset([0.5, 0.3, 0.2], [500, 50, 20], 0.005) == [
        [252, 26, 11],
        [151, 16, 7],
        [101, 11, 5],
    ]
    assert get_size_per_split_per_dataset([0.5, 0.3, 0.2], [500, 50, 20]) == [
        [250, 25, 10],
        [150, 15, 6],
        [100, 10, 4],
    ]
    with pytest.raises(ConfigError, match="normalised"):
        get_size_per_split_per_dataset([1, 1], [10, 0, 0])


def test_build_pauses_the_cyclic_collector_and_restores_it(corpora, tmp_path):
    """The collector is off while the datasets are built and back on afterwards (also
    after a failed build); left off when the caller had turned it off."""
    import gc

    seen = []
    original = GPTDataset.__init__

    def spy(self, *args, **kwargs):
        seen.append(gc.isenabled())
        original(self, *args, **kwargs)

    GPTDataset.__init__ = spy
    try:
        build(tmp_path, [10, 0, 0], blend=(corpora[:2], [1.0, 1.0]), split="100,0,0")
        assert seen and not any(seen) and gc.isenabled()
        with pytest.raises(FormatError):
            build(tmp_path, [10, 0, 0], blend=([str(tmp_path / "missing")], None), split="100,0,0")
        assert gc.isenabled()
        gc.disable()
        try:
            build(tmp_path, [10, 0, 0], blend=(corpora[:2], [1.0, 1.0]), split="100,0,0")
            assert not gc.isenabled()
        finally:
            gc.enable()
    finally:
        GPTDataset.__init__ = original


def test_build_leaves_its_objects_old_and_nothing_frozen(corpora, tmp_path):
    """After a build the datasets sit in the collector's oldest generation (the next young
    collection does not walk them), nothing is left frozen, and a caller's own frozen
    objects stay frozen."""
    import gc

    built = build(tmp_path, [10, 0, 0], blend=(corpora[:2], [1.0, 1.0]), split="100,0,0")
    train = built[0]
    assert gc.get_freeze_count() == 0 and gc.isenabled()
    oldest = {id(o) for o in gc.get_objects(generation=2)}
    assert id(train) in oldest and id(train.datasets[0]) in oldest
    young = {id(o) for o in gc.get_objects(generation=0)}
    assert id(train.datasets[0]) not in young
    kept: list[object] = [[]]  # a tracked object of the caller's, frozen by the caller
    gc.freeze()
    try:
        build(tmp_path, [10, 0, 0], blend=(corpora[:2], [1.0, 1.0]), split="100,0,0")
        assert gc.get_freeze_count() > 0
        walked = {id(o) for g in range(3) for o in gc.get_objects(generation=g)}
        assert id(kept) not in walked  # still frozen: not unfrozen by the build
    finally:
        gc.unfreeze()
    assert id(kept) in {id(o) for o in gc.get_objects(generation=2)}

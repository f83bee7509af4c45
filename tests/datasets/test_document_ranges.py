"""``return_document_ranges``: every sample says which document tokens it holds.

Real corpora, single and blended datasets, both sample paths (numba kernel and
readable), get_batch and the training loader with DataLoader workers: the tokens of
the reported ``(document id, token start, token end)`` rows, read from the ``.bin`` and
concatenated, are exactly the sample's tokens; ``tokens_per_source`` adds up the loss
mask per dataset id; with the flag off nothing is added (megatron-core's layout).
"""

from __future__ import annotations

import numpy
import pytest
from tests.support.dataset_files import write_corpus

from tokenloom.datasets import GPTDataset, GPTDatasetConfig, Split
from tokenloom.datasets.blended import BlendedDataset

VOCAB = 200


@pytest.fixture(scope="module")
def prefixes(tmp_path_factory):
    root = tmp_path_factory.mktemp("ranges")
    out = []
    for i in range(3):
        lengths = numpy.random.default_rng(40 + i).integers(1, 60, 30 + 7 * i)
        out.append(write_corpus(root / f"c{i}", lengths, seed=40 + i, vocab=VOCAB))
    return out


def _config(prefixes, **options):
    fields = dict(
        random_seed=3,
        sequence_length=32,
        split="100,0,0",
        blend=(prefixes, None),
        tokenizer={"vocab_size": VOCAB, "eod": 2},
        path_to_cache=None,
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=True,
        create_attention_mask=False,
        return_document_ranges=True,
    )
    fields.update(options)
    return GPTDatasetConfig(**fields)


def _gpt(prefix, config, size=60):
    low = GPTDataset.build_low_level_dataset(prefix, config)
    documents = numpy.arange(GPTDataset.numel_low_level_dataset(low), dtype=numpy.int32)
    return GPTDataset(low, prefix, documents, size, Split.train, config)


def _blend(prefixes, **options):
    config = _config(prefixes, **options)
    parts = [_gpt(p, config) for p in prefixes]
    return BlendedDataset(parts, [0.5, 0.3, 0.2], 120, config)


def _text_of(dataset, ranges):
    low = dataset.dataset
    pieces = [low.get(int(d), offset=int(a), length=int(b - a)) for d, a, b in ranges]
    return numpy.concatenate(pieces).astype(numpy.int64)


def _text(sample, extra):
    tokens = numpy.asarray(sample["tokens"], dtype=numpy.int64)
    return numpy.concatenate([tokens, sample["labels"][-1:]]) if extra else tokens


@pytest.mark.parametrize("extra", [True, False])
@pytest.mark.parametrize("numba", ["0", "1"])
def test_sample_ranges_hold_exactly_the_sample_tokens(prefixes, extra, numba, monkeypatch):
    monkeypatch.setenv("TOKENLOOM_DISABLE_NUMBA", numba)
    dataset = _gpt(prefixes[0], _config(prefixes[:1], add_extra_token_to_sequence=extra))
    for i in range(len(dataset)):
        sample = dataset[i]
        ranges = sample["document_ranges"]
        assert ranges.dtype == numpy.int64 and ranges.shape[1] == 3
        numpy.testing.assert_array_equal(_text_of(dataset, ranges), _text(sample, extra))
    assert dataset[None]["document_ranges"].shape == (0, 3)


def test_blended_samples_keep_dataset_id_and_batches_agree(prefixes):
    blend = _blend(prefixes)
    indices = [5, None, 0, 77, 119, 3, 42]
    batch = blend.get_batch(indices)
    counts, ranges = batch["document_range_counts"], batch["document_ranges"]
    for row, i in enumerate(indices):
        if i is None:
            assert counts[row] == 0 and (ranges[row] == -1).all()
            continue
        sample = blend[i]
        assert int(sample["dataset_id"]) == int(batch["dataset_id"][row])
        numpy.testing.assert_array_equal(ranges[row, : counts[row]], sample["document_ranges"])
        source = blend.datasets[int(sample["dataset_id"])]
        numpy.testing.assert_array_equal(
            _text_of(source, sample["document_ranges"]), _text(sample, True)
        )
    per_source = numpy.zeros(3)
    numpy.add.at(per_source, batch["dataset_id"].astype(int), batch["loss_mask"].sum(axis=1))
    assert batch["tokens_per_source"].tolist() == per_source.astype(int).tolist()
    assert batch["tokens_per_source"].sum() < 7 * 32  # eod_mask_loss masked some tokens


def test_flag_off_keeps_megatron_layout(prefixes):
    blend = _blend(prefixes, return_document_ranges=False)
    assert set(blend[4]) == {"dataset_id", "tokens", "labels", "loss_mask", "position_ids"}
    assert set(blend.get_batch([1, 2])) == {
        "dataset_id",
        "tokens",
        "labels",
        "loss_mask",
        "position_ids",
    }


@pytest.mark.processes
@pytest.mark.timeout(300)
@pytest.mark.parametrize("dataloader_type", ["single", "cyclic"])
def test_loader_batches_carry_attribution_from_workers(prefixes, dataloader_type):
    from tokenloom.training import build_pretraining_data_loader

    blend = _blend(prefixes)
    loader = build_pretraining_data_loader(
        blend,
        0,
        dataloader_type=dataloader_type,
        micro_batch_size=4,
        global_batch_size=8,
        data_parallel_rank=1,
        data_parallel_size=2,
        num_workers=2,
    )
    seen = 0
    for batch in loader:
        counts = batch["document_range_counts"].numpy()
        ranges = batch["document_ranges"].numpy()
        ids = batch["dataset_id"].numpy()
        tokens = batch["tokens"].numpy()
        for row in range(tokens.shape[0]):
            source = blend.datasets[int(ids[row])]
            text = _text_of(source, ranges[row, : counts[row]])
            numpy.testing.assert_array_equal(text[:-1], tokens[row])
        mask = batch["loss_mask"].numpy().sum(axis=1)
        want = numpy.bincount(ids.astype(int), weights=mask, minlength=3).astype(int)
        assert batch["tokens_per_source"].tolist() == want.tolist()
        seen += 1
        if seen == 6:
            break
    assert seen == 6


def _attribution(batch):
    return [batch[n] for n in ("document_ranges", "document_range_counts", "tokens_per_source")]


@pytest.mark.parametrize("numba", ["0", "1"])
@pytest.mark.parametrize("kind", ["blend", "gpt"])
def test_reused_attribution_arrays_stay_exact_and_never_overwrite_a_held_batch(
    prefixes, kind, numba, monkeypatch
):
    monkeypatch.setenv("TOKENLOOM_DISABLE_NUMBA", numba)

    def make():
        return _blend(prefixes) if kind == "blend" else _gpt(prefixes[0], _config(prefixes[:1]))

    calls = [[5, None, 0, 57], [59, 3, 42, 8], [8, 42, 59, None], [3, 59, 8, 42]]
    want = [_attribution(make().get_batch(c)) for c in calls]  # each from its own pool
    dataset = make()
    held = _attribution(dataset.get_batch(calls[0]))  # kept: no later call may write in it
    second = _attribution(dataset.get_batch(calls[1]))
    assert not any(a is b for a, b in zip(held, second))
    taken = [id(a) for a in second]
    del second  # dropped: the pool hands the same arrays out again
    third = _attribution(dataset.get_batch(calls[2]))
    assert [id(a) for a in third] == taken
    del third
    fourth = _attribution(dataset.get_batch(calls[3]))
    assert [id(a) for a in fourth] == taken
    for got, expected in ((held, want[0]), (fourth, want[3])):
        for a, b in zip(got, expected):
            numpy.testing.assert_array_equal(a, b)
    assert sum(want[3][2]) > 0  # tokens_per_source was zeroed, not added to


def test_attribution_pool_pickles_empty_and_zeroes_reused_tokens():
    import pickle

    from tokenloom.datasets._ranges import AttributionPool

    pool = AttributionPool()
    first = pool.take(2, 3, 1)
    first[2][0] = 7
    copy = pickle.loads(pickle.dumps(pool))
    assert copy.take(2, 3, 1)[0] is not first[0]
    ranges = first[0]
    del first
    assert pool.take(2, 3, 1)[0] is not ranges  # still referenced (``ranges``): fresh
    del ranges
    again = pool.take(2, 3, 1)
    assert pool.take(2, 3, 1)[0] is not again[0]  # ``again`` holds it
    assert again[2].tolist() == [0]

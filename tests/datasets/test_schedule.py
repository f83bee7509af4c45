"""``blend_schedule``: validation, a real blend built with a 3-phase schedule, its cache
identity, and a training loader resumed mid-schedule."""

from __future__ import annotations

import pickle

import numpy
import pytest
from tests.support.random_corpora import EOD, write_corpus

from tokenloom.builder import BlendedMegatronDatasetBuilder
from tokenloom.datasets import GPTDataset, GPTDatasetConfig, SimpleTokenizer
from tokenloom.datasets.blended import BlendedDataset
from tokenloom.errors import ConfigError
from tokenloom.index.schedule import scheduled_targets

SCHEDULE = [(0, [8, 2, 0]), (400, [1, 1, 8]), (800, [1, 1, 1], "linear"), (1200, [0, 1, 1])]
SIZES = [1600, 20, 0]


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpora")
    return [write_corpus(root / f"s{i}", n, seed=40 + i) for i, n in enumerate((200, 150, 150))]


def config(tmp_path, corpora, **fields) -> GPTDatasetConfig:
    base = dict(
        random_seed=3,
        sequence_length=16,
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        tokenizer=SimpleTokenizer(32000, EOD),
        path_to_cache=str(tmp_path / "cache"),
        blend=(corpora, [1, 1, 1]),
        split="98,2,0",
        blend_schedule=SCHEDULE,
    )
    base.update(fields)
    return GPTDatasetConfig(**base)


def build(cfg):
    return BlendedMegatronDatasetBuilder(GPTDataset, SIZES, lambda: True, cfg).build()


def test_the_schedule_is_normalised(tmp_path, corpora):
    phases = config(tmp_path, corpora).blend_schedule
    assert phases[0] == (0, [0.8, 0.2, 0.0])
    assert phases[2] == (800, [1 / 3, 1 / 3, 1 / 3], "linear")
    assert len(phases[3]) == 2


@pytest.mark.parametrize(
    ("schedule", "message"),
    [
        ([], "non-empty list"),
        ([(5, [1, 1, 1])], r"blend_schedule\[0\]: start_sample=5"),
        ([(0, [1, 1, 1]), (0, [1, 1, 1])], r"blend_schedule\[1\]: start_sample=0 must be"),
        ([(0, [1, 1])], r"blend_schedule\[0\]: 2 weights for the 3 prefixes"),
        ([(0, [1, -1, 1])], r"blend_schedule\[0\]: weight -1"),
        ([(0, [1, 1, 1]), (9, [0, 0, 0])], r"blend_schedule\[1\]: weights \[0, 0, 0\]"),
        ([(0, [1, 1, 1]), (9, [1, 1, 1], "ramp")], r"kind 'ramp'"),
        ([(0, [1, 1, 1]), (9, [1, 1, 1], "linear")], r"blend_schedule\[1\] is linear"),
        ([(0, [1, 1, 0]), (9, [1, 2, 0])], r"weight 0 in every phase"),
        ([(1.5, [1, 1, 1])], r"start_sample=1.5"),
        ([(0, [1, float("nan"), 1])], "weight nan"),
        ("0:1,1,1", "non-empty list"),
    ],
)
def test_ambiguous_schedules_are_refused(tmp_path, corpora, schedule, message):
    with pytest.raises(ConfigError, match=message):
        config(tmp_path, corpora, blend_schedule=schedule)


def test_a_schedule_needs_blend_with_weights(tmp_path, corpora):
    with pytest.raises(ConfigError, match="give them too"):
        config(tmp_path, corpora, blend=(corpora, None))
    with pytest.raises(ConfigError, match="needs blend"):
        config(tmp_path, corpora, blend=None, split=None, blend_per_split=[(corpora, None)] * 3)


def test_each_phase_serves_its_weights(tmp_path, corpora):
    train, valid, _ = build(config(tmp_path, corpora))
    assert isinstance(train, BlendedDataset) and train.schedule is not None
    assert valid.schedule is None  # valid and test keep blend's weights
    ids = numpy.asarray(train.dataset_index)
    schedule = [phase[0] for phase in train.config.blend_schedule]
    from tokenloom.datasets.schedule import to_arrays

    arrays = to_arrays(train.config.blend_schedule)
    for start in [*schedule[1:], len(train) - 1]:
        counts = numpy.bincount(ids[:start], minlength=3)
        target = scheduled_targets(arrays, start - 1)
        assert numpy.all(numpy.abs(counts - target) <= 1.0), (start, counts, target)
    # constant phases: counts within the phase follow its weights (each end within 1)
    for (low, weights), high in [((0, [0.8, 0.2, 0]), 400), ((400, [0.1, 0.1, 0.8]), 800)]:
        counts = numpy.bincount(ids[low:high], minlength=3)
        assert numpy.all(numpy.abs(counts - numpy.array(weights) * (high - low)) <= 2)
    assert not numpy.any(ids[1200:] == 0) and not numpy.any(ids[:400] == 2)
    # every sample is the one its contributing dataset serves
    k = 1000
    sample = train[k]
    j, s = train.dataset_index[k], train.dataset_sample_index[k]
    assert numpy.array_equal(sample["tokens"], train.datasets[j][s]["tokens"])


def test_the_schedule_is_in_the_cache_key(tmp_path, corpora):
    first = build(config(tmp_path, corpora))[0]
    changed = [(0, [8, 2, 0]), (400, [1, 1, 8]), (800, [1, 1, 1], "linear"), (1300, [0, 1, 1])]
    second = build(config(tmp_path, corpora, blend_schedule=changed))[0]
    assert first.unique_description != second.unique_description
    assert first.cache_key.stem != second.cache_key.stem
    assert "blend_schedule" in first.unique_description
    assert not numpy.array_equal(first.dataset_index, second.dataset_index)
    again = build(config(tmp_path, corpora))[0]
    assert again.cache_key.stem == first.cache_key.stem
    assert numpy.array_equal(again.dataset_index, first.dataset_index)


def test_one_phase_is_the_weighted_blend(tmp_path, corpora):
    fixed = build(config(tmp_path, corpora, blend=(corpora, [5, 3, 2]), blend_schedule=None))[0]
    scheduled = build(config(tmp_path / "s", corpora, blend_schedule=[(0, [5, 3, 2])]))[0]
    assert len(fixed) == len(scheduled)
    assert fixed.dataset_index.tobytes() == scheduled.dataset_index.tobytes()
    assert fixed.dataset_sample_index.tobytes() == scheduled.dataset_sample_index.tobytes()
    assert [len(d) for d in fixed.datasets] == [len(d) for d in scheduled.datasets]


def test_a_loader_resumed_mid_schedule_serves_the_same_batches(tmp_path, corpora):
    torch = pytest.importorskip("torch")
    from tokenloom.training import build_pretraining_data_loader

    train = build(config(tmp_path, corpora))[0]

    def loader():
        return build_pretraining_data_loader(train, 0, micro_batch_size=8)

    def ids(batch):
        return batch["dataset_id"].tolist(), batch["tokens"]

    continuous = iter(loader())
    reference = [ids(next(continuous)) for _ in range(110)]  # through phase 2 (880 samples)
    first = loader()
    iterator = iter(first)
    for _ in range(55):  # stop at sample 440, in phase 1
        next(iterator)
    state = pickle.loads(pickle.dumps(first.state_dict()))
    second = loader()
    second.load_state_dict(state)
    resumed = iter(second)
    for step in range(55, 110):
        got = ids(next(resumed))
        assert got[0] == reference[step][0]
        assert torch.equal(torch.as_tensor(got[1]), torch.as_tensor(reference[step][1]))

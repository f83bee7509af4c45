"""``max_epochs_per_source``: validation, and a build refused where the blend passes the
cap, at the global sample where it does."""

from __future__ import annotations

import dataclasses
import math
import re

import numpy
import pytest
from tests.support.random_corpora import EOD, write_corpus

from tokenloom.builder import BlendedMegatronDatasetBuilder
from tokenloom.datasets import GPTDataset, GPTDatasetConfig, SimpleTokenizer
from tokenloom.datasets.repetition import passing_count, repetitions
from tokenloom.errors import ConfigError


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpora")
    return [write_corpus(root / f"r{i}", n, seed=60 + i) for i, n in enumerate((120, 20))]


def config(tmp_path, corpora, **fields) -> GPTDatasetConfig:
    base = dict(
        random_seed=3,
        sequence_length=16,
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        tokenizer=SimpleTokenizer(32000, EOD),
        path_to_cache=str(tmp_path / "cache"),
        blend=(corpora, [1, 1]),
        split="100,0,0",
    )
    base.update(fields)
    return GPTDatasetConfig(**base)


def build(cfg, size=2000):
    return BlendedMegatronDatasetBuilder(GPTDataset, [size, 0, 0], lambda: True, cfg).build()


@pytest.mark.parametrize(
    ("cap", "message"),
    [
        (0, r"max_epochs_per_source=0 must be a number > 0"),
        (True, r"max_epochs_per_source=True must be a number > 0"),
        ("2", r"max_epochs_per_source='2' must be a number > 0"),
        ([1, 2, 3], r"3 caps for 2 prefixes in blend"),
        ([1, float("nan")], r"max_epochs_per_source\[1\]=nan"),
    ],
)
def test_bad_caps_are_refused(tmp_path, corpora, cap, message):
    with pytest.raises(ConfigError, match=message):
        config(tmp_path, corpora, max_epochs_per_source=cap)


def test_passing_count_is_the_first_count_past_the_cap():
    for cap, tokens, seq, extra in [(2.0, 1000, 16, 1), (0.5, 999, 7, 0), (3.3, 17, 16, 1)]:
        n = passing_count(cap, tokens, seq, extra)
        assert repetitions(n, tokens, seq, extra) > cap
        assert n == 1 or repetitions(n - 1, tokens, seq, extra) <= cap


def test_a_blend_past_the_cap_is_refused_where_it_passes(tmp_path, corpora):
    train = build(config(tmp_path, corpora))[0]  # no cap: builds
    tokens = [int(part._get_num_tokens_per_epoch()) for part in train.datasets]
    drawn = numpy.bincount(train.dataset_index, minlength=2)
    reached = [repetitions(int(d), t, 16, 1) for d, t in zip(drawn, tokens)]
    assert reached[1] > 4 > reached[0]  # the small source repeats, the large one does not
    cap = math.floor(reached[1]) - 0.5
    with pytest.raises(ConfigError) as error:
        build(config(tmp_path, corpora, max_epochs_per_source=cap))
    text = str(error.value)
    assert f"serves {corpora[1]} {reached[1]:.2f} times" in text
    at = int(re.search(r"global sample (\d+)", text).group(1))
    counts = numpy.cumsum(train.dataset_index == 1)  # the same blend: caps change no index
    assert repetitions(int(counts[at]), tokens[1], 16, 1) > cap
    assert repetitions(int(counts[at - 1]), tokens[1], 16, 1) <= cap
    assert train.dataset_index[at] == 1
    # one cap per source: only the capped one counts
    build(config(tmp_path, corpora, max_epochs_per_source=[cap, reached[1] + 1]))
    with pytest.raises(ConfigError, match=str(corpora[1])):
        build(config(tmp_path, corpora, max_epochs_per_source=[reached[1] + 1, cap]))


def test_a_single_dataset_past_the_cap_is_refused(tmp_path, corpora):
    cfg = config(tmp_path, corpora, blend=([corpora[1]], None), max_epochs_per_source=2)
    with pytest.raises(ConfigError, match=r"past max_epochs_per_source=2: it passes the cap"):
        build(cfg, size=500)
    build(dataclasses.replace(cfg, max_epochs_per_source=None), size=500)

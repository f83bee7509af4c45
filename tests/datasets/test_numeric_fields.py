"""Every numeric field of GPTDatasetConfig / BlendedMegatronDatasetConfig (issue 18,
class 8): 0, negative, NaN, infinite and huge values are either meaningful (megatron-core
builds them too, to the same samples) or a ConfigError naming the field, the value and
the valid range."""

from __future__ import annotations

import json
import math

import numpy
import pytest
from tests.support.dataset_files import write_corpus

from tokenloom.builder import BlendedMegatronDatasetBuilder
from tokenloom.datasets import GPTDataset, GPTDatasetConfig
from tokenloom.errors import ConfigError

NAN, INF = math.nan, math.inf
HUGE = 10**400  # an int beyond any float

# field -> [(value, message)], each refused at construction
REFUSED = {
    "random_seed": [
        (-1, r"random_seed=-1: must be an integer in \[0, 4294967295\]"),
        (2**32, "random_seed=4294967296"),
        (NAN, "random_seed=nan"),
        (1.0, "random_seed=1.0"),
        (True, "random_seed=True"),
    ],
    "sequence_length": [
        (0, r"sequence_length=0: must be an integer in \[1, 2147483647\]"),
        (-4, "sequence_length=-4"),
        (2**31, "sequence_length=2147483648"),
        (HUGE, "sequence_length=1000"),
        (INF, "sequence_length=inf"),
    ],
    "num_dataset_builder_threads": [
        (0, "num_dataset_builder_threads=0: must be an integer >= 1"),
        (-1, "num_dataset_builder_threads=-1"),
        (NAN, "num_dataset_builder_threads=nan"),
    ],
    "mid_level_dataset_surplus": [
        (-0.1, r"mid_level_dataset_surplus=-0.1: must be a finite number in \[0, 1e\+06\]"),
        (NAN, "mid_level_dataset_surplus=nan"),
        (INF, "mid_level_dataset_surplus=inf"),
        (1e300, "mid_level_dataset_surplus=1e\\+300"),
        (HUGE, "mid_level_dataset_surplus=1000"),
        (True, "mid_level_dataset_surplus=True"),
    ],
    "data_parallel_size": [(0, "data_parallel_size=0: must be an integer >= 1")],
    "sequence_parallel_size": [(-1, "sequence_parallel_size=-1: must be an integer >= 0")],
    "context_parallel_size": [(0, "context_parallel_size=0: must be an integer >= 1")],
    "split": [
        ("0,0,0", "the weights sum to zero"),
        ("nan,1,1", "is not a list of non-negative numbers"),
        ("inf,1", "is not a list of non-negative numbers"),
        ("-1,1", "is not a list of non-negative numbers"),  # megatron-core reads "1,1"
        ("1e3,1", "is not a list of non-negative numbers"),  # megatron-core reads "1,3,1"
        ("9" * 400, "too large to add up"),
        ("1,2,3,4", "has 4 weights"),
    ],
    "blend weights": [
        (0, "weight 0 must be a finite number > 0"),
        (-1, "weight -1 must be a finite number > 0"),
        (NAN, "weight nan"),
        (INF, "weight inf"),
        (HUGE, "weight 1000"),
        (1e308, "too large to add up as floats"),
    ],
    "tokenizer": [
        ({"vocab_size": 0, "eod": 0}, "tokenizer.vocab_size=0"),
        ({"vocab_size": -5, "eod": 0}, "tokenizer.vocab_size=-5"),
        ({"vocab_size": 100.0, "eod": 0}, "tokenizer.vocab_size=100.0"),
        ({"vocab_size": 100, "eod": -1}, "tokenizer.eod=-1"),
        ({"vocab_size": 100, "eod": 100}, "tokenizer.eod = 100 is not a token id"),
        ({"vocab_size": 100, "eod": 1, "pad": -2}, "tokenizer.pad = -2"),
        ({"vocab_size": 100, "eod": 1, "pad": 100}, "tokenizer.pad = 100"),
    ],
}


def _fields(**overrides):
    fields = dict(
        random_seed=1,
        sequence_length=8,
        blend=(["data/a", "data/b"], None),
        split="98,2,0",
        tokenizer={"vocab_size": 32000, "eod": 2},
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
    )
    fields.update(overrides)
    return fields


CASES = [(field, value, message) for field, rows in REFUSED.items() for value, message in rows]


@pytest.mark.parametrize(
    "field, value, message", CASES, ids=[f"{f}={v!r}"[:40] for f, v, _ in CASES]
)
def test_refused_with_field_value_and_range(field, value, message):
    if field == "blend weights":
        overrides = {"blend": (["data/a", "data/b"], [value, 1.0])}
        if value == 1e308:
            overrides = {"blend": (["data/a", "data/b"], [value, value])}
    else:
        overrides = {field: value}
    with pytest.raises(ConfigError, match=message):
        GPTDatasetConfig(**_fields(**overrides))


# values with a meaning, which megatron-core builds too: tokenloom builds the same samples
MEANINGFUL = {
    "seed_max": dict(random_seed=2**32 - 1),
    "seed_zero": dict(random_seed=0),
    "sequence_length_1": dict(sequence_length=1),
    "threads_beyond_prefixes": dict(num_dataset_builder_threads=10**6),
    "surplus_zero": dict(mid_level_dataset_surplus=0.0),
    "surplus_large": dict(mid_level_dataset_surplus=1000.0),
    "tiny_weight": dict(weights=[1e-300, 1.0]),
    "integer_weights": dict(weights=[3, 7]),
    "split_with_zeros": dict(split="0,100,0"),
}


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    root = tmp_path_factory.mktemp("numeric_corpora")
    return [
        write_corpus(root / "a", [37] * 30, seed=1, vocab=1000),
        write_corpus(root / "b", [23] * 40, seed=2, vocab=1000),
    ]


def _case(name, corpora, cache):
    extra = dict(MEANINGFUL[name])
    weights = extra.pop("weights", [0.5, 0.5])
    config = dict(
        random_seed=7,
        sequence_length=16,
        blend=[list(corpora), weights],
        split="90,10,0",
        path_to_cache=str(cache),
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        mid_level_dataset_surplus=0.005,
    )
    config.update(extra)
    return config


_MEGATRON = r"""
import json, sys, tempfile, numpy, torch.distributed as dist
dist.init_process_group("gloo", init_method="file://" + tempfile.mktemp(), rank=0, world_size=1)
from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig

class Tokenizer:
    vocab_size, eod = 1000, 2
    unique_identifiers = {"class": "Tokenizer"}
    @property
    def pad(self):
        raise AttributeError("no pad")

out = {}
for name, config in json.loads(sys.argv[1]).items():
    datasets = BlendedMegatronDatasetBuilder(
        GPTDataset, [40, 8, 2], lambda: True, GPTDatasetConfig(tokenizer=Tokenizer(), **config)
    ).build()
    out[name] = [None if d is None else [len(d), d[0]["tokens"].tolist(), d[len(d) - 1]["tokens"].tolist()] for d in datasets]
print(json.dumps(out))
"""


def _summary(datasets):
    return [
        None
        if d is None
        else [
            len(d),
            numpy.asarray(d[0]["tokens"]).tolist(),
            numpy.asarray(d[len(d) - 1]["tokens"]).tolist(),
        ]
        for d in datasets
    ]


@pytest.mark.megatron
@pytest.mark.timeout(600)
def test_meaningful_extremes_build_what_megatron_core_builds(tmp_path, corpora):
    from tests.support.megatron_core import require_megatron, run_json

    require_megatron()
    cases = {name: _case(name, corpora, tmp_path / "megatron" / name) for name in MEANINGFUL}
    theirs = run_json(_MEGATRON, json.dumps(cases))
    for name in MEANINGFUL:
        config = _case(name, corpora, tmp_path / "ours" / name)
        config["blend"] = (config["blend"][0], config["blend"][1])
        datasets = BlendedMegatronDatasetBuilder(
            GPTDataset,
            [40, 8, 2],
            lambda: True,
            GPTDatasetConfig(tokenizer={"vocab_size": 1000, "eod": 2}, **config),
        ).build()
        assert _summary(datasets) == theirs[name], name

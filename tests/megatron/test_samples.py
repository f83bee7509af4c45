"""Under the compat layer, megatron's own names give megatron-core's samples.

Each case is built twice in subprocesses by the same code (``_runner.py``, importing
``megatron.core.datasets.*``): once by megatron-core 0.16.1 itself, once after
``tokenloom.megatron.install()``. Every sample must match in keys, tensor dtype, shape
and values. The cases cover Megatron-LM's ways of extending the datasets: a FIM-like
subclass that overrides ``_query_document_sample_shuffle_indices`` with a stateful RNG
(as ``GPTFIMDataset`` does), an SFT-like ``MegatronDataset`` subclass with its own
low-level dataset, and a config subclass whose fields join the cache key.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy
import pytest
from tests.support.megatron_core import require_megatron, run_json

from tokenloom.format import IndexedDatasetBuilder

pytestmark = [pytest.mark.megatron, pytest.mark.timeout(900)]

RUNNER = (Path(__file__).with_name("_runner.py")).read_text()
VOCAB, EOD = 30000, 2
SAMPLES = [0, 1, 2, 5, 17, 40, "pad"]


def write_corpus(prefix: Path, documents: int, seed: int) -> str:
    rng = numpy.random.RandomState(seed)
    builder = IndexedDatasetBuilder(f"{prefix}.bin", dtype=numpy.uint16)
    for _ in range(documents):
        doc = rng.randint(3, VOCAB, size=rng.randint(2, 90)).astype(numpy.uint16)
        doc[-1] = EOD
        builder.add_item(doc)
        builder.end_document()
    builder.finalize(f"{prefix}.idx")
    return str(prefix)


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpora")
    return [write_corpus(root / f"c{i}", 120 + 40 * i, seed=i) for i in range(2)]


CASES: dict[str, dict] = {}
"""Every case of this module, by name (each test adds its own at import)."""


def case(name: str, value: dict) -> str:
    CASES[name] = value
    return name


@pytest.fixture(scope="module")
def results(corpora, tmp_path_factory):
    """``{mode: {case name: result}}``: every case built once per mode."""
    require_megatron()
    root = tmp_path_factory.mktemp("compat")
    lines = root / "conversations.jsonl"
    rng = numpy.random.RandomState(3)
    lines.write_text(
        "".join(
            json.dumps(rng.randint(3, 999, size=rng.randint(1, 40)).tolist()) + "\n"
            for _ in range(50)
        )
    )
    out = {}
    for mode in ("megatron", "tokenloom"):
        cases = json.loads(json.dumps(CASES))
        for name, one in cases.items():
            blend = one["config"].get("blend")
            if blend is not None:
                blend[0] = [
                    {"c0": corpora[0], "c1": corpora[1], "lines": str(lines)}[p] for p in blend[0]
                ]
            if one["config"].get("path_to_cache"):
                one["config"]["path_to_cache"] = str(root / f"cache-{mode}-{name}")
        out[mode] = run_json(RUNNER, mode, json.dumps(cases), timeout=900)
    return out


def run_both(name: str, results: dict) -> tuple[dict, dict]:
    return results["megatron"][name], results["tokenloom"][name]


def assert_same(megatron: dict, tokenloom: dict) -> None:
    assert megatron.keys() == tokenloom.keys()
    for split in megatron:
        theirs, ours = megatron[split], tokenloom[split]
        assert (theirs is None) == (ours is None), split
        if theirs is None:
            continue
        assert ours["len"] == theirs["len"], split
        assert len(ours["samples"]) == len(theirs["samples"])
        for k, (a, b) in enumerate(zip(theirs["samples"], ours["samples"])):
            assert sorted(a) == sorted(b), f"{split} sample {k}: keys {sorted(b)} != {sorted(a)}"
            for key in a:
                assert b[key] == a[key], f"{split} sample {k} field {key}: {b[key]} != {a[key]}"


def gpt_case(prefixes, weights=None, **config) -> dict:
    base = dict(
        random_seed=1234,
        sequence_length=32,
        blend=[prefixes, weights],
        split="90,6,4",
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        path_to_cache="set per mode",
    )
    base.update(config)
    return {
        "class": "GPTDataset",
        "config": base,
        "sizes": [60, 8, 4],
        "samples": SAMPLES,
        "vocab_size": VOCAB,
        "eod": EOD,
    }


GPT_OPTIONS = {
    "defaults": {},
    "no-attention-mask": {"create_attention_mask": False},
    "resets": {"reset_position_ids": True, "reset_attention_mask": True, "eod_mask_loss": True},
    "no-extra-token": {"add_extra_token_to_sequence": False},
}
for _name, _options in GPT_OPTIONS.items():
    case(f"gpt-{_name}", gpt_case(["c0"], **_options))


@pytest.mark.parametrize("options", sorted(GPT_OPTIONS))
def test_gpt_samples_are_megatrons_tensors(results, options):
    megatron, tokenloom = run_both(f"gpt-{options}", results)
    assert_same(megatron, tokenloom)
    assert tokenloom["train"]["samples"][0]["tokens"][0] == "torch.int64"
    assert tokenloom["train"]["samples"][0]["loss_mask"][0] == "torch.float32"


case("blend", gpt_case(["c0", "c1"], [0.3, 0.7]))


def test_weighted_blend_samples(results):
    megatron, tokenloom = run_both("blend", results)
    assert_same(megatron, tokenloom)
    assert tokenloom["train"]["type"] == "BlendedDataset"
    assert tokenloom["train"]["samples"][0]["dataset_id"][0] == "numpy int16"


_mock = gpt_case([])
_mock["class"] = "MockGPTDataset"
del _mock["config"]["blend"]
_mock["config"]["split"] = "990,9,1"
case("mock", _mock)


def test_mock_samples(results):
    megatron, tokenloom = run_both("mock", results)
    assert_same(megatron, tokenloom)


for _rate in (1.0, 0.5):
    _infill = gpt_case(["c0"])
    _infill["class"] = "InfillDataset"
    _infill["config"]["infill_rate"] = _rate
    case(f"infill-{_rate}", _infill)


@pytest.mark.parametrize("rate", [1.0, 0.5])
def test_a_fim_like_subclass_hook_is_called_as_megatron_calls_it(results, rate):
    megatron, tokenloom = run_both(f"infill-{rate}", results)
    assert_same(megatron, tokenloom)
    first = tokenloom["train"]["samples"][0]["tokens"][2]
    if rate == 1.0:
        assert first[0] == 5  # the marker: the override ran
    assert tokenloom["train"]["type"] == "InfillDataset"


_sft = gpt_case(["lines"])
_sft["class"] = "SFTLikeDataset"
_sft["config"]["path_to_cache"] = None
case("sft", _sft)


def test_an_sft_like_subclass_with_its_own_low_level_dataset(results):
    megatron, tokenloom = run_both("sft", results)
    assert_same(megatron, tokenloom)
    assert tokenloom["train"]["type"] == "SFTLikeDataset"

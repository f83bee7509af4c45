"""Edge configs that megatron-core builds (issue 9, item 16): tokenloom builds them too,
with the same indices and samples (the differential harness of tests/differential)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy
import pytest
from tests.differential import test_megatron as diff

from tokenloom.format import IndexedDatasetBuilder

pytestmark = [pytest.mark.megatron, pytest.mark.slow]


def _corpus(prefix, documents):
    builder = IndexedDatasetBuilder(f"{prefix}.bin", dtype=numpy.uint16)
    for document in documents:
        builder.add_item(numpy.asarray(document, dtype=numpy.uint16))
        builder.end_document()
    builder.finalize(f"{prefix}.idx")
    return str(prefix)


def _base(**overrides):
    config = dict(
        random_seed=3,
        sequence_length=8,
        vocab_size=diff.VOCAB,
        eod=diff.EOD,
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        create_attention_mask=True,
        add_extra_token_to_sequence=True,
        drop_last_partial_validation_sequence=True,
        mid_level_dataset_surplus=0.005,
        num_dataset_builder_threads=1,
    )
    config.update(overrides)
    return config


def _cases(root):
    rng = numpy.random.RandomState(1)
    many = _corpus(
        root / "many",
        [list(rng.randint(3, 1000, int(n))) + [diff.EOD] for n in rng.randint(1, 60, 40)],
    )
    one = _corpus(root / "one", [[7]])  # a split of a single token
    return [
        {
            "name": "seq_len_1",
            "config": _base(sequence_length=1, blend=[[many], None], split="90,10,0"),
            "sizes": [50, 5, None],
        },
        {
            "name": "single_token",
            "config": _base(blend=[[one], None], split="1"),
            "sizes": [6, None, None],
        },
        {
            "name": "empty_split_none",
            "config": _base(blend=[[many], None], split="100,0,0"),
            "sizes": [20, None, None],
        },
        {
            "name": "empty_split_zero",
            "config": _base(blend=[[many], None], split="100,0,0"),
            "sizes": [20, 0, 0],
        },
        {
            "name": "float32_overshoot",
            "config": _base(
                sequence_length=1000,
                blend=[[many], None],
                split="98,2,0",
                drop_last_partial_validation_sequence=False,
            ),
            "sizes": [10, 500_000, None],
        },
    ]


@pytest.fixture(scope="module")
def megatron(tmp_path_factory):
    reason = diff.megatron_missing_reason()
    if reason:
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("edges")
    cases = _cases(root)
    for i, case in enumerate(cases):
        case["config"]["path_to_cache"] = str(root / f"megatron-cache{i}")
        case["samples"] = [0, 1, 2, 5]
    (root / "spec.json").write_text(json.dumps(cases))
    out = root / "megatron"
    out.mkdir()
    subprocess.run(
        [sys.executable, str(diff.RUNNER), str(root / "spec.json"), str(out)],
        env=diff.megatron_env(),
        check=True,
        timeout=900,
    )
    return cases, out


@pytest.mark.timeout(900)
@pytest.mark.parametrize("index", range(5))
def test_megatron_builds_it_and_so_does_tokenloom(megatron, index, tmp_path):
    cases, out = megatron
    case = cases[index]
    error = out / f"{case['name']}.error.json"
    if error.exists():
        pytest.skip(f"megatron-core rejects it too: {error.read_text()[:300]}")
    want = numpy.load(out / f"{case['name']}.npz")
    got = diff.tokenloom_build(case, tmp_path)
    for name in want.files:
        array = diff.lookup(got, name)
        assert array.dtype == want[name].dtype and numpy.array_equal(array, want[name]), name

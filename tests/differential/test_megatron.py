"""Differential tests: tokenloom's builder against an installed megatron-core 0.16.1.

Random corpora (random document counts and lengths) and random configs (seeds,
sequence lengths, splits, weights, sizes, blends per split, multiple validation
sets, sample options, surplus, sequences_per_dataset) are built by both;
every index array, length and sample field must be equal in value and dtype, and
a config megatron-core rejects must be rejected by tokenloom with a TokenloomError.

megatron-core runs in a subprocess (``_megatron_runner.py``).  It is found either in
this Python environment or in ``$TOKENLOOM_MEGATRON_PATH``, e.g. after::

    python -m pip install --no-deps --target /tmp/megatron-core megatron-core==0.16.1
    export TOKENLOOM_MEGATRON_PATH=/tmp/megatron-core   # needs torch and numpy

``TOKENLOOM_DIFF_CASES`` (default 16) and ``TOKENLOOM_DIFF_SEED`` (default 0) scale
and vary the run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy
import pytest
from tests.support.megatron_core import megatron_env, megatron_missing_reason

from tokenloom.builder import BlendedMegatronDatasetBuilder
from tokenloom.datasets import GPTDataset, GPTDatasetConfig, SimpleTokenizer
from tokenloom.datasets.blended import BlendedDataset
from tokenloom.errors import TokenloomError

pytestmark = [pytest.mark.megatron, pytest.mark.slow]

NUM_CASES = int(os.environ.get("TOKENLOOM_DIFF_CASES", "16"))
SEED = int(os.environ.get("TOKENLOOM_DIFF_SEED", "0"))
SPLITS = ("train", "valid", "test")
SAMPLES = [0, 1, 2, 7, 31, 100, 257]
VOCAB, EOD = 32000, 2
RUNNER = Path(__file__).with_name("_megatron_runner.py")


# --------------------------------------------------------------------------- random inputs
def write_corpora(root: Path, rng: numpy.random.RandomState) -> list:
    from tokenloom.format import IndexedDatasetBuilder

    prefixes = []
    for c in range(4):
        prefix = root / f"corpus{c}"
        builder = IndexedDatasetBuilder(f"{prefix}.bin", dtype=numpy.uint16)
        max_len = int(rng.choice([8, 60, 400]))
        for _ in range(int(rng.randint(20, 160))):
            doc = rng.randint(3, VOCAB, size=int(rng.randint(1, max_len + 1))).astype(numpy.uint16)
            doc[-1] = EOD
            builder.add_item(doc)
            builder.end_document()
        builder.finalize(f"{prefix}.idx")
        prefixes.append(str(prefix))
    return prefixes


def _split(rng) -> str:
    weights = [
        int(rng.randint(10, 100)),
        int(rng.choice([0, rng.randint(10, 40)])),
        int(rng.choice([0, rng.randint(10, 40)])),
    ]
    return ",".join(map(str, weights))


def _blend(rng, prefixes, weighted: bool):
    chosen = [
        prefixes[i] for i in sorted(rng.choice(len(prefixes), rng.randint(1, 4), replace=False))
    ]
    weights = [float(round(rng.uniform(0.1, 3.0), 3)) for _ in chosen] if weighted else None
    return [chosen, weights]


def _size(rng, weighted: bool):
    if not weighted and rng.rand() < 0.35:
        return None
    return int(rng.choice([rng.randint(1, 40), rng.randint(40, 600)]))


def _base_config(rng) -> dict:
    return dict(
        random_seed=int(rng.randint(0, 2**31)),
        sequence_length=int(rng.choice([rng.randint(2, 9), rng.randint(9, 130)])),
        vocab_size=VOCAB,
        eod=EOD,
        reset_position_ids=bool(rng.rand() < 0.3),
        reset_attention_mask=bool(rng.rand() < 0.3),
        eod_mask_loss=bool(rng.rand() < 0.3),
        create_attention_mask=bool(rng.rand() < 0.5),
        add_extra_token_to_sequence=bool(rng.rand() < 0.8),
        drop_last_partial_validation_sequence=bool(rng.rand() < 0.7),
        mid_level_dataset_surplus=float(rng.choice([0.005, 0.0, 0.05])),
        num_dataset_builder_threads=int(rng.randint(1, 3)),
    )


def random_case(rng, prefixes, name: str) -> dict:
    config = _base_config(rng)
    if rng.rand() < 0.6:
        weighted = bool(rng.rand() < 0.5)
        config["blend"] = _blend(rng, prefixes, weighted)
        config["split"] = _split(rng)
        sizes = [_size(rng, weighted) for _ in SPLITS]
    else:
        per_split, sizes = [], []
        for i in range(3):
            weighted = bool(rng.rand() < 0.4)
            per_split.append(None if i and rng.rand() < 0.25 else _blend(rng, prefixes, weighted))
            sizes.append(_size(rng, weighted))
        config["blend_per_split"] = per_split
        valid = per_split[1]
        if valid is not None and valid[1] is None and len(valid[0]) > 1 and rng.rand() < 0.5:
            config["multiple_validation_sets"] = True
            config["full_validation"] = bool(rng.rand() < 0.5)
            if config["full_validation"]:
                sizes[1] = None
    if rng.rand() < 0.3:
        config["sequences_per_dataset"] = "__counts__"
    return {"name": name, "config": config, "sizes": sizes, "samples": SAMPLES}


def fixed_error_cases(rng, prefixes) -> list:
    """Configs megatron-core rejects (by assertion): tokenloom must reject them too."""
    weights_without_size = {
        "name": "weights_without_size",
        "config": dict(_base_config(rng), blend=[prefixes[:2], [0.3, 0.7]], split="80,20,0"),
        "sizes": [10, None, 5],
        "samples": SAMPLES,
    }
    full_validation_with_size = {
        "name": "full_validation_with_size",
        "config": dict(
            _base_config(rng),
            blend_per_split=[[prefixes[:1], None], [prefixes[1:3], None], None],
            multiple_validation_sets=True,
            full_validation=True,
        ),
        "sizes": [10, 5, None],
        "samples": SAMPLES,
    }
    return [weights_without_size, full_validation_with_size]


def _counts(prefixes) -> dict:
    from tokenloom.format import read_index_header

    return {
        p: [
            read_index_header(p + ".idx").sequence_count,
            read_index_header(p + ".idx").document_count,
        ]
        for p in prefixes
    }


@pytest.fixture(scope="module")
def differential(tmp_path_factory):
    reason = megatron_missing_reason()
    if reason:
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("differential")
    rng = numpy.random.RandomState(SEED)
    prefixes = write_corpora(root, rng)
    counts = _counts(prefixes)
    cases = [random_case(rng, prefixes, f"case{i}") for i in range(NUM_CASES)]
    cases += fixed_error_cases(rng, prefixes)
    for i, case in enumerate(cases):
        case["config"]["path_to_cache"] = str(root / f"megatron-cache{i}")
        if case["config"].get("sequences_per_dataset"):
            case["config"]["sequences_per_dataset"] = counts
    (root / "spec.json").write_text(json.dumps(cases))
    out = root / "megatron"
    out.mkdir()
    subprocess.run(
        [sys.executable, str(RUNNER), str(root / "spec.json"), str(out)],
        env=megatron_env(),
        check=True,
        timeout=900,
    )
    return root, cases, out


# --------------------------------------------------------------------------- comparison
def tokenloom_build(case: dict, path_to_cache: Path):
    fields = dict(case["config"])
    tokenizer = SimpleTokenizer(fields.pop("vocab_size"), fields.pop("eod"))
    fields["path_to_cache"] = str(path_to_cache)
    config = GPTDatasetConfig(tokenizer=tokenizer, **fields)
    return BlendedMegatronDatasetBuilder(GPTDataset, case["sizes"], lambda: True, config).build()


def lookup(datasets, name: str):
    parts = name.split(".")
    dataset = datasets[SPLITS.index(parts.pop(0))]
    if parts[0].startswith("set"):
        dataset = dataset[int(parts.pop(0)[3:])]
    if parts[0].startswith("sub") and isinstance(dataset, BlendedDataset):
        dataset = dataset.datasets[int(parts.pop(0)[3:])]
    if parts == ["len"]:
        return numpy.asarray(len(dataset), dtype=numpy.int64)
    if parts[0].startswith("sample") and parts[0] != "sample_index":
        return numpy.asarray(dataset[int(parts[0][6:])][parts[1]])
    return numpy.asarray(getattr(dataset, parts[0]))


@pytest.mark.parametrize("index", range(NUM_CASES + 2))
def test_same_indices_and_samples_as_megatron(differential, index, tmp_path):
    root, cases, out = differential
    case = cases[index]
    error = out / f"{case['name']}.error.json"
    if error.exists():
        megatron_error = json.loads(error.read_text())
        try:
            tokenloom_build(case, tmp_path)
        except TokenloomError as tokenloom_error:
            assert not isinstance(tokenloom_error, AssertionError)
            return
        pytest.fail(
            f"megatron-core rejected {case} ({megatron_error['type']}: "
            f"{megatron_error['message']}) but tokenloom accepted it"
        )
    assert not case["name"].startswith(("weights_", "full_")), "megatron-core accepted it"
    want = numpy.load(out / f"{case['name']}.npz")
    got = tokenloom_build(case, tmp_path)
    for name in want.files:
        array = lookup(got, name)
        assert array.dtype == want[name].dtype, (case, name, array.dtype, want[name].dtype)
        assert numpy.array_equal(array, want[name]), (case, name)
    present = {name.split(".")[0] for name in want.files}
    assert [split in present for split in SPLITS] == [
        d is not None and (not isinstance(d, list) or len(d) > 0) for d in got
    ], case

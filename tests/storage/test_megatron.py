"""Differential test: megatron-core 0.16.1's own S3 and MSC readers and tokenloom's,
on the same bucket of the loopback server (megatron-core finds it through
``AWS_ENDPOINT_URL`` and ``MSC_CONFIG``), read the same tokens."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy
import pytest
from tests.storage.storage_helpers import storage_config

from tokenloom.storage import open_remote_dataset

pytestmark = [pytest.mark.s3, pytest.mark.megatron]

RUNNER = Path(__file__).with_name("_megatron_storage_runner.py")
REPO = Path(__file__).resolve().parents[2]


def megatron_path() -> str:
    path = os.environ.get("TOKENLOOM_MEGATRON_PATH") or str(REPO / ".megatron-core")
    if not (Path(path) / "megatron" / "core" / "datasets").is_dir():
        pytest.skip(
            "megatron-core 0.16.1 not found: set TOKENLOOM_MEGATRON_PATH to an "
            "unpacked megatron-core (pip install --no-deps --target DIR "
            "megatron-core==0.16.1)"
        )
    return path


def run_megatron(spec: dict, tmp_path: Path) -> dict:
    spec_file, out = tmp_path / "spec.json", tmp_path / "megatron.npz"
    spec_file.write_text(json.dumps(spec))
    env = dict(
        os.environ,
        OMP_NUM_THREADS="1",
        PYTHONPATH=os.pathsep.join([megatron_path(), os.environ.get("PYTHONPATH", "")]),
    )
    done = subprocess.run(
        [sys.executable, str(RUNNER), str(spec_file), str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    with numpy.load(out) as data:
        return {k: data[k] for k in data.files}


def _ours(prefix: str, config) -> tuple:
    from tokenloom.format.reader import IndexFile

    local_idx, reader = open_remote_dataset(prefix, config)
    index = IndexFile(local_idx, False)
    pieces = [
        reader.read(index.header.dtype, int(n), int(p))
        for p, n in zip(index.pointers, index.lengths)
    ]
    return numpy.asarray([len(p) for p in pieces]), numpy.concatenate(pieces)


@pytest.mark.timeout(600)
def test_same_documents_as_megatron_s3_and_msc_readers(s3, tmp_path):
    prefixes = [s3.remote["small"], s3.msc("wide")]
    theirs = run_megatron(
        {"prefixes": prefixes, "idx_cache": str(tmp_path / "mcache"), "chunk": 4096, "gpt": None},
        tmp_path,
    )
    config = storage_config(tmp_path, bin_chunk_nbytes=4096)
    for j, prefix in enumerate(prefixes):
        lengths, tokens = _ours(prefix, config)
        numpy.testing.assert_array_equal(theirs[f"p{j}.lengths"], lengths)
        numpy.testing.assert_array_equal(theirs[f"p{j}.tokens"], tokens)
        assert theirs[f"p{j}.tokens"].dtype == tokens.dtype
    # megatron-core's bugs, observed here and not copied
    assert str(theirs["p0.exists"]) == "ParamValidationError"  # head_object(bucket=..)
    assert int(theirs["p1.zero_length_read"]) > 0  # get(0, 1, 0) returned data
    cached = tmp_path / "mcache" / "loom-data" / "corpora" / "small.idx"
    assert cached.is_file()  # the same .idx cache layout as ours
    assert (
        Path(config.path_to_idx_cache, "loom-data", "corpora", "small.idx").read_bytes()
        == cached.read_bytes()
    )


@pytest.mark.timeout(600)
def test_same_blended_gpt_samples_as_megatron_from_s3(s3, tmp_path):
    from tokenloom.builder import BlendedMegatronDatasetBuilder
    from tokenloom.datasets import GPTDataset, GPTDatasetConfig, SimpleTokenizer

    prefixes, weights, samples = [s3.remote["small"], s3.msc("other")], [0.7, 0.3], list(range(60))
    gpt = {
        "seed": 4,
        "sequence_length": 48,
        "prefixes": prefixes,
        "weights": weights,
        "size": 60,
        "samples": samples,
        "path_to_cache": str(tmp_path / "mindices"),
    }
    theirs = run_megatron(
        {
            "prefixes": [],
            "idx_cache": str(tmp_path / "mcache"),
            "chunk": 256 * 1024 * 1024,
            "gpt": gpt,
        },
        tmp_path,
    )
    config = GPTDatasetConfig(
        random_seed=4,
        sequence_length=48,
        blend=(prefixes, weights),
        split="100,0,0",
        path_to_cache=str(tmp_path / "indices"),
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        create_attention_mask=False,
        tokenizer=SimpleTokenizer(32000, 2),
        mmap_bin_files=False,
        object_storage_cache_path=str(tmp_path / "idx"),
    )
    ours = BlendedMegatronDatasetBuilder(GPTDataset, [60, 0, 0], lambda: True, config).build()[0]
    for k in samples:
        numpy.testing.assert_array_equal(numpy.asarray(ours[k]["tokens"]), theirs[f"gpt.sample{k}"])

"""Issue 9, item 16a: megatron-core counts samples with a float32 ``ceil`` that can land
above the exact count; it then repeats the last document's end. Every tokenloom
sample-index implementation does the same, bit for bit (checked against megatron-core's
own ``build_sample_idx`` in a subprocess). The documents are synthetic sizes only (no
corpus): 537 M tokens in three documents."""

from __future__ import annotations

import subprocess
import sys

import numpy
import pytest
from tests.differential import test_megatron as diff

from tokenloom.index import reference
from tokenloom.index._common import count_samples
from tokenloom.index.sample import build_sample_index, build_sample_index_vectorized
from tokenloom.kernels import KERNELS

SEQUENCE_LENGTH = 8191  # 65,568 * 8191 + 1 tokens: float32 gives 65,569 samples
TOKENS = 65_568 * SEQUENCE_LENGTH + 1
SIZES = numpy.array([TOKENS // 3, TOKENS // 3, TOKENS - 2 * (TOKENS // 3)], dtype=numpy.int32)
DOCUMENTS = numpy.array([2, 0, 1], dtype=numpy.int32)
ARGS = (SIZES, DOCUMENTS, SEQUENCE_LENGTH, 1, TOKENS, False, 1)


def test_the_config_really_overshoots():
    exact = -(-(TOKENS - 1) // SEQUENCE_LENGTH)
    assert count_samples(TOKENS, SEQUENCE_LENGTH, 1, drop_last=False) == exact + 1
    assert count_samples(TOKENS, SEQUENCE_LENGTH, 1, drop_last=True) == exact


def _implementations():
    yield "reference", reference.build_sample_index(*ARGS)
    yield "vectorized", build_sample_index_vectorized(*ARGS)
    yield "dispatched", build_sample_index(*ARGS)
    fast = KERNELS.get("sample_index")
    if fast is not None:
        out = numpy.empty((count_samples(TOKENS, SEQUENCE_LENGTH, 1, False) + 1, 2), numpy.int32)
        status, _ = fast.sample_index(SIZES, DOCUMENTS, SEQUENCE_LENGTH, 1, out)
        assert status == fast.OK
        yield "kernel", out


def test_every_implementation_repeats_the_last_documents_end():
    outputs = dict(_implementations())
    last_end = (DOCUMENTS.size - 1, int(SIZES[DOCUMENTS[-1]]) - 1)
    for name, out in outputs.items():
        assert out.shape == (65_570, 2) and out.dtype == numpy.int32, name
        assert tuple(out[-1]) == last_end and tuple(out[-2]) == last_end, name
        assert numpy.array_equal(out, outputs["reference"]), name


@pytest.mark.megatron
@pytest.mark.timeout(300)
def test_equal_to_megatron_core_build_sample_idx(tmp_path):
    reason = diff.megatron_missing_reason()
    if reason:
        pytest.skip(reason)
    numpy.save(tmp_path / "sizes.npy", SIZES)
    numpy.save(tmp_path / "documents.npy", DOCUMENTS)
    script = (
        "import sys, numpy\n"
        "from megatron.core.datasets.helpers import build_sample_idx\n"
        f"d = sys.argv[1]\n"
        "out = build_sample_idx(numpy.load(d + '/sizes.npy'), numpy.load(d + '/documents.npy'),"
        f" {SEQUENCE_LENGTH}, 1, {TOKENS}, False, True)\n"
        "numpy.save(d + '/megatron.npy', out)\n"
    )
    subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        env=diff.megatron_env(),
        check=True,
        timeout=240,
    )
    want = numpy.load(tmp_path / "megatron.npy")
    assert want.shape[0] == count_samples(TOKENS, SEQUENCE_LENGTH, 1, False) + 1  # overshoot
    for name, got in _implementations():
        assert got.dtype == want.dtype and numpy.array_equal(got, want), name

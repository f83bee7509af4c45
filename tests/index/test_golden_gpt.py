"""document + sample + shuffle index of whole-corpus GPTDataset cases from megatron-core.

The split ``100,0,0`` exposes every document of ``corpora/c0``, so the three indices
can be rebuilt from the kernels alone, following GPTDataset's recipe (epoch count,
separate final epoch below 80 %, one RandomState for all three).
"""

from __future__ import annotations

import json

import numpy
import pytest

import tokenloom.index as fast
import tokenloom.index.reference as reference

CASES = ["single_multi_epoch_separate_final", "single_multi_epoch_joint_final"]
DEFAULTS = {"random_seed": 1234, "sequence_length": 64, "add_extra_token_to_sequence": True}


def _sequence_lengths(idx_path):
    """The int32 lengths from an MMIDIDX .idx header (9+8+1+8+8 bytes, then lengths)."""
    raw = idx_path.read_bytes()
    assert raw[:9] == b"MMIDIDX\x00\x00"
    count = int(numpy.frombuffer(raw, numpy.int64, 1, 18)[0])
    return numpy.frombuffer(raw, numpy.int32, count, 34)


def _build(impl, lengths, num_samples, config):
    seq, extra = config["sequence_length"], int(config["add_extra_token_to_sequence"])
    documents = numpy.arange(lengths.size, dtype=numpy.int32)
    tokens = int(lengths.sum())
    epochs = fast.num_epochs_needed(tokens, num_samples, seq, extra)
    separate = False
    if epochs > 1:
        before_final = ((epochs - 1) * tokens - extra) // seq
        per_epoch = (tokens - extra) // seq
        separate = num_samples - before_final < int(0.80 * per_epoch)
    rng = numpy.random.RandomState(config["random_seed"])
    document_index = impl.build_document_index(documents, epochs, rng, separate)
    sample_index = impl.build_sample_index(
        lengths, document_index, seq, epochs, tokens, True, extra
    )
    total = sample_index.shape[0] - 1
    shuffle_index = impl.build_shuffle_index(before_final if separate else total, total, rng)
    return epochs, separate, document_index, sample_index, shuffle_index


@pytest.mark.parametrize("impl", [fast, reference], ids=["fast", "reference"])
@pytest.mark.parametrize("name", CASES)
def test_gpt_indices_match_megatron(golden_dir, golden_manifest, impl, name):
    case = next(c for c in golden_manifest["cases"] if c.get("name") == name)
    config = {**DEFAULTS, **case["config"]}
    lengths = _sequence_lengths(golden_dir / "corpora" / "c0.idx")
    epochs, separate, *indices = _build(impl, lengths, case["sizes"][0], config)
    assert epochs > 1, json.dumps(case)
    with numpy.load(golden_dir / case["arrays"]) as expected:
        for what, array in zip(("document_index", "sample_index", "shuffle_index"), indices):
            reference_array = expected[f"train.{what}"]
            assert array.dtype == reference_array.dtype, what
            numpy.testing.assert_array_equal(array, reference_array, what)

"""tokenloom.index.ranges: the vectorised document ranges equal their readable twin, and
the CSR/padded layouts agree."""

from __future__ import annotations

import numpy
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tokenloom.errors import ConfigError
from tokenloom.index.ranges import padded_ranges, reference_sample_ranges, sample_ranges
from tokenloom.index.reference import build_sample_index


@st.composite
def indices(draw):
    """A real document/sample index built by the reference sample-index builder."""
    lengths = numpy.array(draw(st.lists(st.integers(0, 30), min_size=1, max_size=12)))
    if lengths.sum() == 0:
        lengths[0] = 1
    epochs = draw(st.integers(1, 3))
    order = numpy.random.default_rng(draw(st.integers(0, 99))).permutation(
        numpy.tile(numpy.arange(lengths.size, dtype=numpy.int32), epochs)
    )
    extra = draw(st.integers(0, 1))
    total = int(lengths.sum()) * epochs
    seq = draw(st.integers(1, max(1, min(20, total - extra))))
    sample_index = build_sample_index(
        lengths.astype(numpy.int32), order, seq, epochs, int(lengths.sum()), True, extra
    )
    return lengths, order, sample_index, extra


@settings(max_examples=200, deadline=None)
@given(data=indices(), picks=st.lists(st.integers(-1, 10**6), max_size=20))
def test_vectorised_ranges_equal_the_reference(data, picks):
    lengths, order, sample_index, extra = data
    count = sample_index.shape[0] - 1
    assume(count > 0)
    rows = numpy.array([p if p < 0 else p % count for p in picks], dtype=numpy.int64)
    offsets, ranges = sample_ranges(order, sample_index, lengths, rows, extra)
    assert offsets.shape == (rows.size + 1,) and offsets[0] == 0
    for i, row in enumerate(rows.tolist()):
        want = reference_sample_ranges(order, sample_index, lengths, row, extra)
        numpy.testing.assert_array_equal(ranges[offsets[i] : offsets[i + 1]], want)
    padded, counts = padded_ranges(offsets, ranges)
    for i in range(rows.size):
        got = padded[i, : counts[i]]
        numpy.testing.assert_array_equal(got, ranges[offsets[i] : offsets[i + 1]])
        assert (padded[i, counts[i] :] == -1).all()


@settings(max_examples=100, deadline=None)
@given(data=indices())
def test_every_sample_covers_its_length(data):
    """Each sample's parts hold seq + extra tokens (the sample index's own stride),
    and consecutive samples share exactly their boundary token when extra is 1."""
    lengths, order, sample_index, extra = data
    count = sample_index.shape[0] - 1
    offsets, ranges = sample_ranges(order, sample_index, lengths, numpy.arange(count), extra)
    sizes = numpy.add.reduceat(ranges[:, 2] - ranges[:, 1], offsets[:-1]) if ranges.size else []
    want = [
        int(sum(lengths[order[p]] for p in range(int(a[0]), int(b[0]))) - a[1] + b[1] + extra)
        for a, b in zip(sample_index[:-1], sample_index[1:])
    ]
    assert list(sizes) == want
    assert (ranges[:, 2] > ranges[:, 1]).all() and (ranges[:, 2] <= lengths[ranges[:, 0]]).all()


def test_padding_rows_have_no_ranges_and_bad_rows_are_refused():
    lengths = numpy.array([5, 5], dtype=numpy.int32)
    order = numpy.array([0, 1], dtype=numpy.int32)
    sample_index = build_sample_index(lengths, order, 4, 1, 10, True, 1)
    offsets, ranges = sample_ranges(order, sample_index, lengths, [-1, 0, -1], 1)
    assert offsets.tolist() == [0, 0, 1, 1]
    assert ranges.tolist() == [[0, 0, 5]]
    with pytest.raises(ConfigError, match="outside"):
        sample_ranges(order, sample_index, lengths, [sample_index.shape[0] - 1], 1)
    with pytest.raises(ConfigError, match="width"):
        padded_ranges(*sample_ranges(order, sample_index, lengths, [1], 1), width=1)


GOLDEN_DEFAULT_SEQ = 64


def _corpus(golden_dir, prefix):
    """``(lengths, tokens, starts)`` of a golden uint16 corpus (one sequence a document),
    read straight from its ``.idx`` header and ``.bin`` bytes."""
    raw = (golden_dir / f"{prefix}.idx").read_bytes()
    count = int(numpy.frombuffer(raw, numpy.int64, 1, 18)[0])
    lengths = numpy.frombuffer(raw, numpy.int32, count, 34).astype(numpy.int64)
    tokens = numpy.fromfile(golden_dir / f"{prefix}.bin", dtype=numpy.uint16)
    return lengths, tokens, numpy.concatenate([[0], numpy.cumsum(lengths)])


def _golden_samples(case, arrays):
    """``(split, sub-dataset, sample row in that dataset, k)`` of every stored sample."""
    for key in arrays.files:
        parts = key.split(".")
        if len(parts) != 3 or not parts[1].startswith("sample") or parts[2] != "tokens":
            continue
        split, k = parts[0], int(parts[1][len("sample") :])
        if f"{split}.dataset_index" in arrays.files:
            sub = int(arrays[f"{split}.dataset_index"][k])
            yield split, sub, int(arrays[f"{split}.dataset_sample_index"][k]), k
        else:
            yield split, None, k, k


@pytest.mark.parametrize(
    "name",
    [
        "single_basic",
        "single_multi_epoch_separate_final",
        "single_multi_epoch_joint_final",
        "single_no_extra_token",
        "single_masks",
        "blend_weighted",
        "blend_weighted_seq_odd",
        "blend_unweighted_sized",
    ],
)
def test_ranges_read_from_the_bin_are_megatrons_samples(golden_dir, golden_manifest, name):
    """The ranges of megatron-core's own indices, read from the ``.bin`` and
    concatenated, are exactly the tokens megatron-core's GPTDataset served."""
    case = next(c for c in golden_manifest["cases"] if c.get("name") == name)
    config = case["config"]
    extra = int(config.get("add_extra_token_to_sequence", True))
    seq = config.get("sequence_length", GOLDEN_DEFAULT_SEQ)
    corpora = [_corpus(golden_dir, p) for p in config["blend"][0]]
    checked = 0
    with numpy.load(golden_dir / case["arrays"]) as arrays:
        for split, sub, position, k in _golden_samples(case, arrays):
            base = split if sub is None else f"{split}.sub{sub}"
            lengths, tokens, starts = corpora[0 if sub is None else sub]
            row = int(arrays[f"{base}.shuffle_index"][position])
            offsets, ranges = sample_ranges(
                arrays[f"{base}.document_index"],
                arrays[f"{base}.sample_index"],
                lengths,
                [row],
                extra,
            )
            assert offsets.tolist() == [0, ranges.shape[0]]
            text = numpy.concatenate(
                [tokens[starts[d] + a : starts[d] + b] for d, a, b in ranges.tolist()]
            ).astype(numpy.int64)
            served = arrays[f"{split}.sample{k}.tokens"].astype(numpy.int64)
            if extra:
                served = numpy.concatenate([served, arrays[f"{split}.sample{k}.labels"][-1:]])
            assert text.size == seq + extra
            numpy.testing.assert_array_equal(text, served)
            checked += 1
    assert checked > 0, f"no stored sample in {case['arrays']}"

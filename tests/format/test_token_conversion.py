"""Tokens, lengths and modes are read as megatron-core's builder reads them
(``numpy.array(tokens, dtype=dtype)``), with a FormatError wherever megatron-core would
store a different value than the one given (issue 17)."""

from __future__ import annotations

import json

import numpy
import pytest
from tests.support.megatron_core import require_megatron, run_json

from tokenloom.errors import FormatError
from tokenloom.format import IndexedDataset, IndexedDatasetBuilder

# name -> (tokens as JSON-able Python values, how to build them), megatron-core accepts all
ACCEPTED = {
    "number strings": ["1", "2", "65535"],
    "padded number strings": [" 3 ", "+4", "5\n"],
    "mixed ints and strings": [1, "2", 3],
    "mixed integral floats and strings": [1.0, "2", True],
    "nested lists": [[1, 2], ["3", 4]],
    "one number string": "123",
    "empty": [],
}


def _write(tmp_path, name, tokens, lengths, dtype=numpy.uint16):
    builder = IndexedDatasetBuilder(str(tmp_path / f"{name}.bin"), dtype=dtype)
    builder.add_document(tokens, lengths)
    builder.finalize(str(tmp_path / f"{name}.idx"))
    return tmp_path / name


def _count(tokens):
    return int(numpy.array(tokens, dtype=numpy.int64).size)


_MEGATRON = """
import json, sys, numpy, torch
from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder
cases, out = json.loads(sys.argv[1]), sys.argv[2]
for name, (tokens, lengths) in cases.items():
    builder = IndexedDatasetBuilder(f"{out}/{name}.bin", dtype=numpy.uint16)
    builder.add_document(tokens, lengths)
    builder.finalize(f"{out}/{name}.idx")
print(json.dumps("ok"))
"""


@pytest.mark.megatron
@pytest.mark.timeout(300)
def test_bytes_equal_megatron_core_for_every_form_it_accepts(tmp_path):
    require_megatron()
    cases = {
        name.replace(" ", "_"): (tokens, [_count(tokens)]) for name, tokens in ACCEPTED.items()
    }
    theirs = tmp_path / "megatron"
    theirs.mkdir()
    run_json(_MEGATRON, json.dumps(cases), str(theirs))
    for name, (tokens, lengths) in cases.items():
        ours = _write(tmp_path, name, tokens, lengths)
        for ext in (".bin", ".idx"):
            assert (theirs / f"{name}{ext}").read_bytes() == ours.with_suffix(ext).read_bytes(), (
                name,
                ext,
            )


def test_numpy_scalars_tensors_and_strings_become_the_same_tokens(tmp_path):
    torch = pytest.importorskip("torch")
    forms = [
        [numpy.int64(7), numpy.uint8(8), numpy.int16(9)],
        torch.tensor([7, 8, 9]),
        [torch.tensor(7), torch.tensor(8), "9"],
        numpy.array(["7", "8", "9"]),
        [b"7", b"8", b"9"],
        (7.0, 8, "9"),
    ]
    for i, tokens in enumerate(forms):
        prefix = _write(tmp_path, f"f{i}", tokens, ["1", 2.0])  # lengths are read alike
        dataset = IndexedDataset(str(prefix))
        assert [s.tolist() for s in dataset] == [[7], [8, 9]], tokens


# name -> (tokens, dtype, message); megatron-core raises or stores another value
REFUSED = {
    "string over uint16": (["70000"], numpy.uint16, "token 70000 at position 0 does not fit"),
    "negative string": (["1", "-1"], numpy.uint16, "token -1 at position 1 does not fit"),
    "int64 wrapped by numpy": (
        numpy.array([1, 70000]),
        numpy.uint16,
        "token 70000 at position 1 does not fit uint16",
    ),
    "numpy scalar wrapped by numpy": ([numpy.int64(70000)], numpy.uint16, "does not fit"),
    "fraction truncated by numpy": ([1.5, "2"], numpy.int32, "token 1.5 at position 0 is not"),
    "fraction string": (["1.5"], numpy.int32, "'1.5' at position 0 is not an integer"),
    "exponent string": (["1e3"], numpy.int32, "'1e3' at position 0 is not an integer"),
    "word": (["1", "abc"], numpy.int32, "'abc' at position 1 is not an integer"),
    "None": ([1, None], numpy.int32, "None at position 1 is not a number"),
    "nan": ([float("nan")], numpy.int32, "nan at position 0 is not an integer"),
    "huge int": ([2**70], numpy.int64, "does not fit int64"),
    "huge string": (["9" * 30], numpy.int64, "does not fit int64"),
    "ragged": ([[1, 2], [3]], numpy.int32, "cannot convert tokens"),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_values_megatron_would_change_are_refused_by_name(tmp_path, name):
    tokens, dtype, message = REFUSED[name]
    builder = IndexedDatasetBuilder(str(tmp_path / "out.bin"), dtype=dtype)
    with pytest.raises(FormatError, match=message) as caught:
        builder.add_document(tokens, [1])
    assert "out.bin" in str(caught.value)
    with pytest.raises(FormatError, match=message):
        builder.add_item(tokens)
    builder.abort()


def test_numpy_itself_wraps_or_truncates_what_is_refused():
    """The refusals above are real: numpy (hence megatron-core) changes these values."""
    assert numpy.array(numpy.array([70000]), dtype=numpy.uint16).tolist() == [4464]
    assert numpy.array([1.5, "2"], dtype=numpy.int32).tolist() == [1, 2]


@pytest.mark.parametrize(
    "lengths, message",
    [(["1", "x"], "length 'x' at position 1"), ([1.5, 1.5], "length 1.5 at position 0")],
)
def test_lengths_are_read_strictly(tmp_path, lengths, message):
    builder = IndexedDatasetBuilder(str(tmp_path / "out.bin"), dtype=numpy.uint16)
    with pytest.raises(FormatError, match=message):
        builder.add_document([1, 2, 3], lengths)
    builder.abort()


def test_modes_accept_number_strings_and_refuse_fractions(tmp_path):
    builder = IndexedDatasetBuilder(str(tmp_path / "mm.bin"), dtype=numpy.uint16, multimodal=True)
    builder.add_document([1, 2, 3], [1, 2], modes=["3", 4])
    builder.add_item([5], mode="2")
    builder.end_document()
    with pytest.raises(FormatError, match="mode 1.5"):
        builder.add_item([5], mode=1.5)
    with pytest.raises(FormatError, match="mode 200 at position 0 does not fit int8"):
        builder.add_item([5], mode=200)
    builder.finalize(str(tmp_path / "mm.idx"))
    modes = IndexedDataset(str(tmp_path / "mm"), multimodal=True).sequence_modes
    assert modes.tolist() == [3, 4, 2]


def test_bfloat16_tensor_is_a_clear_error(tmp_path):
    torch = pytest.importorskip("torch")
    builder = IndexedDatasetBuilder(str(tmp_path / "out.bin"), dtype=numpy.int32)
    with pytest.raises(FormatError, match="out.bin.*tensor"):
        builder.add_item(torch.tensor([1, 2], dtype=torch.bfloat16))
    builder.abort()

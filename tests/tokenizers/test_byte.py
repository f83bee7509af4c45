"""The built-in byte tokenizer."""

from __future__ import annotations

import pickle

import numpy
import pytest

from tokenloom.errors import TokenizerError
from tokenloom.tokenizers import ByteTokenizer, Tokenizer, load_tokenizer


def test_ids_are_the_utf8_bytes(real_texts):
    tokenizer = ByteTokenizer()
    encoded = tokenizer.encode_batch(real_texts)
    for text, ids in zip(real_texts, encoded):
        assert ids.dtype == numpy.int32
        assert (
            ids.tobytes()
            == numpy.frombuffer(text.encode("utf-8"), numpy.uint8).astype(numpy.int32).tobytes()
        )
        assert tokenizer.decode(ids) == text


def test_attributes_and_protocol():
    tokenizer = load_tokenizer("bytes")
    assert isinstance(tokenizer, ByteTokenizer) and isinstance(tokenizer, Tokenizer)
    assert (tokenizer.vocab_size, tokenizer.eod, tokenizer.pad) == (257, 256, None)
    assert tokenizer.eos == 256
    assert tokenizer.unique_identifiers["class"] == "ByteTokenizer"


def test_flat_form_matches_per_document_form():
    tokenizer = ByteTokenizer()
    texts = ["ab", "", "\u00e9\U0001f600", "z"]
    flat, lengths = tokenizer.encode_batch_flat(texts)
    assert lengths.tolist() == [2, 0, 6, 1]
    assert flat.tolist() == [i for ids in tokenizer.encode_batch(texts) for i in ids.tolist()]


def test_decode_shows_eod_and_rejects_foreign_ids():
    tokenizer = ByteTokenizer()
    assert tokenizer.decode([104, 105, 256, 33]) == "hi<|endoftext|>!"
    with pytest.raises(TokenizerError, match="id 300"):
        tokenizer.decode([104, 300])
    with pytest.raises(TokenizerError, match="id -1"):
        tokenizer.decode([-1])


def test_cut_utf8_decodes_with_replacement_character():
    assert ByteTokenizer().decode([0xC3]) == "\ufffd"


def test_pickles():
    tokenizer = pickle.loads(pickle.dumps(ByteTokenizer()))
    assert tokenizer.encode("x").tolist() == [120]
    assert tokenizer.unique_identifiers == ByteTokenizer().unique_identifiers

"""SentencePiece models trained here on real text."""

from __future__ import annotations

import pickle

import numpy
import pytest

from tokenloom.errors import TokenizerError
from tokenloom.tokenizers import SentencePieceTokenizer, Tokenizer, load_tokenizer
from tokenloom.tokenizers.train import train_sentencepiece


def test_round_trip_on_real_text(sentencepiece_path, real_texts):
    tokenizer = load_tokenizer(f"sentencepiece:{sentencepiece_path}")
    assert isinstance(tokenizer, SentencePieceTokenizer) and isinstance(tokenizer, Tokenizer)
    for text, ids in zip(real_texts, tokenizer.encode_batch(real_texts)):
        assert ids.dtype == numpy.int32
        assert tokenizer.decode(ids) == text


def test_matches_the_library_and_adds_no_bos_eos(sentencepiece_path, real_texts):
    tokenizer = SentencePieceTokenizer(sentencepiece_path)
    expected = [tokenizer.backend.encode(text, out_type=int) for text in real_texts]
    flat, lengths = tokenizer.encode_batch_flat(real_texts)
    assert flat.tolist() == [i for ids in expected for i in ids]
    assert lengths.tolist() == [len(ids) for ids in expected]
    assert tokenizer.eod not in flat.tolist()


def test_special_ids(sentencepiece_path, real_texts, tmp_path):
    tokenizer = load_tokenizer(sentencepiece_path)  # .model extension
    assert tokenizer.vocab_size == 800
    assert tokenizer.eod == tokenizer.backend.eos_id() == 2
    assert tokenizer.pad is None
    padded = train_sentencepiece(real_texts[:3], 500, str(tmp_path / "padded"), pad=True)
    assert padded.pad == 3
    assert SentencePieceTokenizer(sentencepiece_path, eod="<unk>").eod == 0
    with pytest.raises(TokenizerError, match="not in the model"):
        SentencePieceTokenizer(sentencepiece_path, eod="<no-such-piece>")


def test_bad_files(tmp_path):
    with pytest.raises(TokenizerError, match="does not exist"):
        SentencePieceTokenizer(str(tmp_path / "missing.model"))
    garbage = tmp_path / "garbage.model"
    garbage.write_bytes(b"this is not a protobuf")
    with pytest.raises(TokenizerError, match="not a SentencePiece model"):
        SentencePieceTokenizer(str(garbage))


def test_decode_rejects_foreign_ids(sentencepiece_path):
    with pytest.raises(TokenizerError, match="id 800"):
        SentencePieceTokenizer(sentencepiece_path).decode([5, 800])


def test_pickles(sentencepiece_path, real_texts):
    tokenizer = SentencePieceTokenizer(sentencepiece_path)
    clone = pickle.loads(pickle.dumps(tokenizer))
    assert clone.encode(real_texts[2]).tolist() == tokenizer.encode(real_texts[2]).tolist()

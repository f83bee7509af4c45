"""Hugging Face tokenizer.json models (a byte-level BPE trained in the fixture)."""

from __future__ import annotations

import json
import os
import pickle
import shutil

import numpy
import pytest

from tokenloom.errors import TokenizerError
from tokenloom.tokenizers import HFTokenizer, Tokenizer, load_tokenizer


def test_round_trip_is_exact_on_real_text(hf_path, real_texts):
    tokenizer = load_tokenizer(f"hf:{hf_path}")
    assert isinstance(tokenizer, HFTokenizer) and isinstance(tokenizer, Tokenizer)
    for text, ids in zip(real_texts, tokenizer.encode_batch(real_texts)):
        assert ids.dtype == numpy.int32
        assert 0 <= ids.min() and ids.max() < tokenizer.vocab_size
        assert tokenizer.decode(ids) == text


def test_matches_the_library_encoder(hf_path, real_texts):
    tokenizer = HFTokenizer(hf_path)
    expected = [tokenizer.backend.encode(text, add_special_tokens=False).ids for text in real_texts]
    flat, lengths = tokenizer.encode_batch_flat(real_texts)
    assert lengths.tolist() == [len(ids) for ids in expected]
    assert flat.tolist() == [i for ids in expected for i in ids]
    assert len(flat) < sum(len(text) for text in real_texts)  # merges actually happen


def test_special_tokens_detected(hf_path):
    tokenizer = HFTokenizer(hf_path)
    assert tokenizer.vocab_size == 600
    assert tokenizer.eod == tokenizer.backend.token_to_id("<|endoftext|>")
    assert tokenizer.pad == tokenizer.backend.token_to_id("<|pad|>")
    assert tokenizer.decode([tokenizer.eod]) == "<|endoftext|>"


def test_folder_and_tokenizer_config(hf_path, tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    shutil.copy(hf_path, folder / "tokenizer.json")
    config = {"eos_token": {"content": "<|pad|>"}, "pad_token": "<|endoftext|>"}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    tokenizer = load_tokenizer(str(folder))  # a folder with tokenizer.json is detected as hf
    assert tokenizer.eod == tokenizer.backend.token_to_id("<|pad|>")
    assert tokenizer.pad == tokenizer.backend.token_to_id("<|endoftext|>")


def test_explicit_eod_by_text_or_id(hf_path):
    assert HFTokenizer(hf_path, eod="<|pad|>").eod == 1
    assert HFTokenizer(hf_path, eod=5).eod == 5
    assert HFTokenizer(hf_path, eod="7").eod == 7
    with pytest.raises(TokenizerError, match="'<eos>' is not in the vocabulary"):
        HFTokenizer(hf_path, eod="<eos>")
    with pytest.raises(TokenizerError, match="outside the vocabulary"):
        HFTokenizer(hf_path, eod=600)


def test_tokenizer_without_specials_has_no_eod(real_texts, tmp_path):
    from tokenloom.tokenizers.train import train_byte_level_bpe

    tokenizer = train_byte_level_bpe(
        real_texts[:2], 300, str(tmp_path / "t.json"), special_tokens=()
    )
    assert tokenizer.eod is None and tokenizer.pad is None


def test_bad_files(tmp_path):
    with pytest.raises(TokenizerError, match="does not exist"):
        HFTokenizer(str(tmp_path / "missing.json"))
    broken = tmp_path / "broken.json"
    broken.write_text('{"model": 1}')
    with pytest.raises(TokenizerError, match="not a valid Hugging Face tokenizer.json"):
        load_tokenizer(str(broken))


def test_identifiers_follow_the_file_content(hf_path, tmp_path):
    copy = tmp_path / "copy.json"
    shutil.copy(hf_path, copy)
    first = HFTokenizer(str(copy)).unique_identifiers
    assert first["tokenizer_path"] == [os.path.abspath(copy)]
    data = json.loads(copy.read_text())
    data["added_tokens"][0]["content"] = "<|changed|>"
    copy.write_text(json.dumps(data))
    assert HFTokenizer(str(copy)).unique_identifiers["sha256"] != first["sha256"]
    json.dumps(first)  # serialisable for cache descriptions


def test_pickle_reloads_the_same_tokenizer(hf_path, real_texts):
    tokenizer = HFTokenizer(hf_path)
    clone = pickle.loads(pickle.dumps(tokenizer))
    assert clone.unique_identifiers == tokenizer.unique_identifiers
    assert clone.encode(real_texts[0]).tolist() == tokenizer.encode(real_texts[0]).tolist()

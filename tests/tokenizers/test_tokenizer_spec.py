"""Tokenizer specs, auto-detection and the shared protocol."""

from __future__ import annotations

import json

import pytest

from tokenloom.errors import TokenizerError
from tokenloom.tokenizers import load_tokenizer, parse_tokenizer_spec


@pytest.mark.parametrize("spec, expected", [
    ("bytes", ("bytes", "")),
    ("BYTE", ("bytes", "")),
    ("hf:/m/tokenizer.json", ("hf", "/m/tokenizer.json")),
    ("huggingface:x", ("hf", "x")),
    ("tiktoken:cl100k_base", ("tiktoken", "cl100k_base")),
    ("tiktoken:/a/b.tiktoken", ("tiktoken", "/a/b.tiktoken")),
    ("sentencepiece:/a/m.model", ("sentencepiece", "/a/m.model")),
    ("spm:m.model", ("sentencepiece", "m.model")),
    ("/a/tokenizer.json", ("hf", "/a/tokenizer.json")),
    ("enc.tiktoken", ("tiktoken", "enc.tiktoken")),
    ("/a/sp.model", ("sentencepiece", "/a/sp.model")),
    ("cl100k_base", ("tiktoken", "cl100k_base")),
])
def test_parse(spec, expected):
    assert parse_tokenizer_spec(spec) == expected


def test_folder_with_tokenizer_json_is_hf(tmp_path):
    (tmp_path / "tokenizer.json").write_text("{}")
    assert parse_tokenizer_spec(str(tmp_path)) == ("hf", str(tmp_path))


@pytest.mark.parametrize("spec, message", [
    ("", "empty tokenizer spec"),
    ("hf:", "names no file"),
    ("/no/such/vocab.txt", r"cannot tell what kind.*\(no such file\)"),
    ("gpt5_magic", "cannot tell what kind"),
])
def test_parse_errors(spec, message):
    with pytest.raises(TokenizerError, match=message):
        parse_tokenizer_spec(spec)


def test_option_errors(hf_path):
    with pytest.raises(TokenizerError, match="eod is fixed at 256"):
        load_tokenizer("bytes", eod=3)
    with pytest.raises(TokenizerError, match="only to tiktoken"):
        load_tokenizer(f"hf:{hf_path}", pattern="r50k_base")


def test_every_kind_follows_the_protocol(hf_path, tiktoken_path, sentencepiece_path, real_texts):
    specs = ["bytes", f"hf:{hf_path}", f"tiktoken:{tiktoken_path}",
             f"sentencepiece:{sentencepiece_path}"]
    for spec in specs:
        tokenizer = load_tokenizer(spec)
        assert isinstance(tokenizer.vocab_size, int) and isinstance(tokenizer.eod, int)
        assert tokenizer.pad is None or isinstance(tokenizer.pad, int)
        text = real_texts[3]
        assert tokenizer.detokenize(tokenizer.tokenize(text)) == text
        # megatron-style cache descriptions serialise the tokenizer this way
        described = json.loads(json.dumps({"tokenizer": tokenizer}, default=lambda obj:
                                          obj.unique_identifiers))
        assert described["tokenizer"]["vocab_size"] == tokenizer.vocab_size
        assert described["tokenizer"]["eod"] == tokenizer.eod
        assert json.loads(tokenizer.unique_description) == described["tokenizer"]
        assert repr(tokenizer).startswith(type(tokenizer).__name__ + "(")

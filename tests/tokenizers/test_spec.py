"""Tokenizer specs, auto-detection and the shared protocol."""

from __future__ import annotations

import json

import pytest

from tokenloom.errors import TokenizerError
from tokenloom.tokenizers import load_tokenizer, parse_tokenizer_spec


@pytest.mark.parametrize(
    "spec, expected",
    [
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
    ],
)
def test_parse(spec, expected):
    assert parse_tokenizer_spec(spec) == expected


def test_folder_with_tokenizer_json_is_hf(tmp_path):
    (tmp_path / "tokenizer.json").write_text("{}")
    assert parse_tokenizer_spec(str(tmp_path)) == ("hf", str(tmp_path))


@pytest.mark.parametrize(
    "spec, message",
    [
        ("", "empty tokenizer spec"),
        ("hf:", "names no file"),
        ("/no/such/vocab.txt", r"cannot tell what kind.*\(no such file\)"),
        ("gpt5_magic", "cannot tell what kind"),
    ],
)
def test_parse_errors(spec, message):
    with pytest.raises(TokenizerError, match=message):
        parse_tokenizer_spec(spec)


def test_option_errors(hf_path):
    with pytest.raises(TokenizerError, match="eod is fixed at 256"):
        load_tokenizer("bytes", eod=3)
    with pytest.raises(TokenizerError, match="only to tiktoken"):
        load_tokenizer(f"hf:{hf_path}", pattern="r50k_base")


def test_every_kind_follows_the_protocol(hf_path, tiktoken_path, sentencepiece_path, real_texts):
    specs = [
        "bytes",
        f"hf:{hf_path}",
        f"tiktoken:{tiktoken_path}",
        f"sentencepiece:{sentencepiece_path}",
    ]
    for spec in specs:
        tokenizer = load_tokenizer(spec)
        assert isinstance(tokenizer.vocab_size, int) and isinstance(tokenizer.eod, int)
        assert tokenizer.pad is None or isinstance(tokenizer.pad, int)
        text = real_texts[3]
        assert tokenizer.detokenize(tokenizer.tokenize(text)) == text
        # megatron-style cache descriptions serialise the tokenizer this way
        described = json.loads(
            json.dumps({"tokenizer": tokenizer}, default=lambda obj: obj.unique_identifiers)
        )
        assert described["tokenizer"]["vocab_size"] == tokenizer.vocab_size
        assert described["tokenizer"]["eod"] == tokenizer.eod
        assert json.loads(tokenizer.unique_description) == described["tokenizer"]
        assert repr(tokenizer).startswith(type(tokenizer).__name__ + "(")


@pytest.mark.parametrize("kind", ["bytes", "hf", "tiktoken", "sentencepiece"])
def test_deferred_encoding_equals_the_library_ids(
    kind, hf_path, tiktoken_path, sentencepiece_path, real_texts
):
    """encode_batch_deferred (the pipeline's split form) gives the library's own ids."""
    import numpy

    spec = {
        "bytes": "bytes",
        "hf": f"hf:{hf_path}",
        "tiktoken": f"tiktoken:{tiktoken_path}",
        "sentencepiece": f"sentencepiece:{sentencepiece_path}",
    }[kind]
    tokenizer = load_tokenizer(spec)
    texts = real_texts[:20] + [""]
    finish = tokenizer.encode_batch_deferred(texts)
    flat, lengths = finish()
    expected = {
        "bytes": lambda t: list(t.encode("utf-8")),
        "hf": lambda t: tokenizer.backend.encode(t, add_special_tokens=False).ids,
        "tiktoken": lambda t: tokenizer.backend.encode_ordinary(t),
        "sentencepiece": lambda t: tokenizer.backend.encode(t, out_type=int),
    }[kind]
    assert flat.dtype == numpy.int32 and lengths.tolist() == [len(expected(t)) for t in texts]
    assert flat.tolist() == [i for t in texts for i in expected(t)]
    empty_flat, empty_lengths = tokenizer.encode_batch_deferred([])()
    assert empty_flat.size == 0 and empty_lengths.size == 0

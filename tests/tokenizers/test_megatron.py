"""Megatron's tokenizer types, the special-token settings, and every tokenizer's identity()."""

from __future__ import annotations

import json
import os
import pickle

import pytest

from tokenloom.errors import TokenizerError
from tokenloom.tokenizers import load_tokenizer
from tokenloom.tokenizers.megatron import MegatronTokenizerArgs, build_megatron_tokenizer

GOLDEN = os.path.join(
    os.path.dirname(os.path.abspath(__file__)),
    "..",
    "..",
    "..",
    "shared",
    "golden",
    "megatron-preprocess",
    "tokenizers",
)
requires_golden = pytest.mark.skipif(not os.path.isdir(GOLDEN), reason=f"no golden set at {GOLDEN}")


def _build(kind: str, **kwargs):
    return build_megatron_tokenizer(MegatronTokenizerArgs(kind, **kwargs))


@requires_golden
def test_hf_special_tokens_follow_the_setting():
    bos = _build("HuggingFaceTokenizer", tokenizer_model=os.path.join(GOLDEN, "hf_bos"))
    plain = _build(
        "HuggingFaceTokenizer",
        tokenizer_model=os.path.join(GOLDEN, "hf_bos"),
        hf_include_special_tokens=False,
    )
    assert bos.encode("a <s> b").tolist()[0] == 1 and bos.added_by_post_processor() == [1]
    assert plain.encode("a <s> b").tolist() == bos.encode("a <s> b").tolist()[1:]
    assert 1 in plain.encode("a <s> b").tolist()  # special-token text is the special token
    assert bos.eod == 2 and bos.special_tokens() == {"<|endoftext|>": 0, "<s>": 1, "</s>": 2}
    assert bos.identity() != plain.identity()


@requires_golden
def test_tiktokenizer_shifts_ranks_and_maps_special_text():
    tok = _build(
        "TikTokenizer",
        tokenizer_model=os.path.join(GOLDEN, "tiktoken", "vocab.json"),
        vocab_size=3045,
    )
    ids = tok.encode("x <s> </s> <unk> <pad> <|endoftext|>").tolist()
    assert {1, 2, 0, 4} <= set(ids) and min(i for i in ids if i > 4) >= 1000
    assert tok.vocab_size == 3045 and tok.eod == 2
    assert tok.decode(tok.encode("hello world")) == "hello world"
    with pytest.raises(TokenizerError, match=r"pass --vocab-size 3045"):
        _build("TikTokenizer", tokenizer_model=os.path.join(GOLDEN, "tiktoken", "vocab.json"))


@requires_golden
def test_legacy_llama2_prepends_bos_and_pickles():
    args = dict(tokenizer_model=os.path.join(GOLDEN, "spm", "spm.model"))
    legacy = _build("Llama2Tokenizer", legacy_tokenizer=True, **args)
    main = _build("Llama2Tokenizer", **args)
    assert legacy.encode("").tolist() == [1] and main.encode("").tolist() == []
    assert legacy.encode("hi").tolist() == [1] + main.encode("hi").tolist()
    again = pickle.loads(pickle.dumps(legacy))
    assert again.encode("hi").tolist() == legacy.encode("hi").tolist()
    assert again.identity() == legacy.identity() and legacy.identity()["add_bos"] is True


@requires_golden
def test_sentencepiece_extra_whitespace_kept_on_request():
    args = dict(tokenizer_model=os.path.join(GOLDEN, "spm", "spm.model"))
    keep = _build("SentencePieceTokenizer", sentencepiece_ignore_extra_whitespaces=False, **args)
    drop = _build("SentencePieceTokenizer", **args)
    assert len(keep.encode("a    b")) > len(drop.encode("a    b"))
    # Megatron's marker character falls back to bytes in this model, and only its last id
    # is dropped: the bytes golden case_50 shows, reproduced as they are
    assert keep.encode("a b").tolist()[:2] == drop.encode("a b").tolist()


@pytest.mark.parametrize(
    "kind, message",
    [
        ("HuggingFaceTokenzier", "did you mean HuggingFaceTokenizer"),
        ("BertWordPieceCase", "not supported by tokenloom preprocess"),
        ("GPT2BPETokenizer", "needs --vocab-file"),
        ("SentencePieceTokenizer", "needs --tokenizer-model"),
    ],
)
def test_bad_megatron_arguments_are_clear(kind, message):
    with pytest.raises(TokenizerError, match=message):
        _build(kind)


def test_a_gpt2_vocab_without_merges_hints_at_merge_file(tmp_path):
    vocab = tmp_path / "vocab.json"
    vocab.write_text(json.dumps({"a": 0, "b": 1, "ab": 2}))
    with pytest.raises(TokenizerError, match=r"GPT-2 vocab.json .*--merge-file merges.txt"):
        load_tokenizer(str(vocab))


def test_identity_of_every_kind(hf_path, tiktoken_path, sentencepiece_path):
    for spec in (
        "bytes",
        f"hf:{hf_path}",
        f"tiktoken:{tiktoken_path}",
        f"sentencepiece:{sentencepiece_path}",
    ):
        identity = load_tokenizer(spec).identity()
        json.dumps(identity)  # JSON-ready
        assert {"kind", "vocab_size", "eod", "pad", "special_tokens"} <= set(identity)
        if spec != "bytes":
            assert identity["files"] and len(identity["sha256"]) >= 64
    assert (
        load_tokenizer(f"hf:{hf_path}").identity()["special_tokens"]["<|endoftext|>"]
        == load_tokenizer(f"hf:{hf_path}").eod
    )

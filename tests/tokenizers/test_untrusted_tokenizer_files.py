"""Crafted tokenizer files (issue 18, classes 5 and 6): nested 100,000 levels deep or over
the size limit, a ``tokenizer.json``, ``tokenizer_config.json`` or Megatron TikTokenizer
vocabulary is a TokenizerError naming the file, never a RecursionError."""

from __future__ import annotations

import shutil

import pytest
from tests.support.untrusted_files import deep_json

from tokenloom.errors import TokenizerError
from tokenloom.tokenizers import huggingface
from tokenloom.tokenizers.huggingface import HFTokenizer
from tokenloom.tokenizers.megatron_tiktoken import MegatronTikTokenizer

pytest.importorskip("tokenizers")


@pytest.mark.parametrize("closed", [False, True])
def test_deep_tokenizer_json_is_a_tokenizer_error(tmp_path, closed):
    path = tmp_path / "tokenizer.json"
    path.write_bytes(deep_json(closed=closed))
    with pytest.raises(TokenizerError, match=str(path)):
        HFTokenizer(str(path))


def test_deep_tokenizer_config_is_a_tokenizer_error(tmp_path, hf_path):
    shutil.copy(hf_path, tmp_path / "tokenizer.json")
    config = tmp_path / "tokenizer_config.json"
    config.write_bytes(b'{"eos_token": ' + deep_json(closed=True) + b"}")
    with pytest.raises(TokenizerError, match=rf"{config}.*levels deep"):
        HFTokenizer(str(tmp_path))


def test_tokenizer_json_over_the_limit_is_a_tokenizer_error(tmp_path, hf_path, monkeypatch):
    shutil.copy(hf_path, tmp_path / "tokenizer.json")
    assert HFTokenizer(str(tmp_path)).vocab_size > 0
    monkeypatch.setattr(huggingface, "MAX_TOKENIZER_BYTES", 1000, raising=False)
    with pytest.raises(TokenizerError, match="tokenizer.json.*larger than the limit of 1000"):
        HFTokenizer(str(tmp_path))


@pytest.mark.parametrize("closed", [False, True])
def test_deep_tiktoken_vocabulary_is_a_tokenizer_error(tmp_path, closed):
    path = tmp_path / "vocab.json"
    path.write_bytes(deep_json(closed=closed))
    with pytest.raises(TokenizerError, match=rf"{path}.*levels deep"):
        MegatronTikTokenizer(str(path))

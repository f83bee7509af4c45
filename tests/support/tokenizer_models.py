"""Real tokenizer models trained here, offline, on the standard library's own text.

Session fixtures shared by tests/tokenizers and tests/preprocess (their conftests
import them).
"""

from __future__ import annotations

import pytest

from tokenloom.preprocess.stdlib_corpus import docstrings, stdlib_root, stdlib_sources
from tokenloom.tokenizers.train import (
    byte_level_bpe_ranks,
    train_byte_level_bpe,
    train_sentencepiece,
    write_tiktoken_file,
)


@pytest.fixture(scope="session")
def real_texts() -> list:
    """Module sources, docstrings and non-ASCII text (html.entities) from the stdlib."""
    texts = [text for _, text in stdlib_sources(max_files=8)]
    texts += [doc for _, doc in docstrings((stdlib_root() / "textwrap.py").read_text("utf-8"))]
    entities = (stdlib_root() / "html" / "entities.py").read_text("utf-8")
    texts.append(entities[-6000:])  # the html5 table: accented letters, symbols, math
    texts.append("emoji and CJK: \U0001f600 \u4e2d\u6587 \u00e9t\u00e9 \u2014 fin")
    return [text for text in texts if text]


@pytest.fixture(scope="session")
def hf_path(tmp_path_factory, real_texts) -> str:
    path = tmp_path_factory.mktemp("hf") / "tokenizer.json"
    train_byte_level_bpe(real_texts, 600, str(path))
    return str(path)


@pytest.fixture(scope="session")
def tiktoken_path(tmp_path_factory, hf_path) -> str:
    from tokenloom.tokenizers import HFTokenizer

    path = tmp_path_factory.mktemp("tiktoken") / "tiny_bpe.tiktoken"
    write_tiktoken_file(byte_level_bpe_ranks(HFTokenizer(hf_path)), str(path))
    return str(path)


@pytest.fixture(scope="session")
def sentencepiece_path(tmp_path_factory, real_texts) -> str:
    prefix = tmp_path_factory.mktemp("spm") / "spm"
    train_sentencepiece(real_texts, 800, str(prefix))
    return f"{prefix}.model"

"""Real text and real tokenizer models, trained offline here."""

from __future__ import annotations

import pytest

from tokenloom.preprocess.stdlib_corpus import docstrings, stdlib_root, stdlib_sources
from tokenloom.tokenizers.train import (byte_level_bpe_ranks, train_byte_level_bpe,
                                        train_sentencepiece, write_tiktoken_file)


@pytest.fixture(scope="session")
def real_texts() -> list:
    """Stdlib module sources and docstrings, non-ASCII text (html.entities), an emoji."""
    texts = [text for _, text in stdlib_sources(max_files=10)]
    decoder = (stdlib_root() / "json" / "decoder.py").read_text("utf-8")
    texts += [doc for _, doc in docstrings(decoder)]
    entities = (stdlib_root() / "html" / "entities.py").read_text("utf-8")
    texts += [entities[-4000:-2000], entities[-2000:]]
    texts.append("emoji and CJK: \U0001F600 \u4e2d\u6587 \u00e9t\u00e9 \u2014 fin")
    return [text for text in texts if text]


@pytest.fixture(scope="session")
def hf_path(tmp_path_factory, real_texts) -> str:
    path = tmp_path_factory.mktemp("hf") / "tokenizer.json"
    train_byte_level_bpe(real_texts, 700, str(path))
    return str(path)


@pytest.fixture(scope="session")
def tiktoken_path(tmp_path_factory, hf_path) -> str:
    from tokenloom.tokenizers import HFTokenizer

    path = tmp_path_factory.mktemp("tiktoken") / "bpe.tiktoken"
    write_tiktoken_file(byte_level_bpe_ranks(HFTokenizer(hf_path)), str(path))
    return str(path)


@pytest.fixture(scope="session")
def sentencepiece_path(tmp_path_factory, real_texts) -> str:
    prefix = tmp_path_factory.mktemp("spm") / "spm"
    train_sentencepiece(real_texts, 900, str(prefix))
    return f"{prefix}.model"


@pytest.fixture(scope="session")
def corpus_records(real_texts) -> list:
    """One record per text with a second string key (its position)."""
    return [{"text": text, "title": f"document {i}", "n": i} for i, text in enumerate(real_texts)]

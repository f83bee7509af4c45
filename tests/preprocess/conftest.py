"""Real text and real tokenizer models (tests/tokenizer_models.py), and records."""

from __future__ import annotations

import pytest
from tests.support.tokenizer_models import hf_path, real_texts, sentencepiece_path, tiktoken_path  # noqa: F401


@pytest.fixture(scope="session")
def corpus_records(real_texts) -> list:  # noqa: F811
    """One record per text with a second string key (its position)."""
    return [{"text": text, "title": f"document {i}", "n": i} for i, text in enumerate(real_texts)]

"""Fixtures of the builder tests: small corpora, and a memo that records fresh files."""

from __future__ import annotations

import pytest
from tests.support.random_corpora import write_corpus

from tokenloom.builder import memo as startup_memo


@pytest.fixture
def no_racy_window(monkeypatch):
    """Corpora written by the test are seconds old; let the memo record them."""
    monkeypatch.setattr(startup_memo, "RACY_WINDOW_NS", 0)


@pytest.fixture
def corpora(tmp_path):
    return [
        write_corpus(tmp_path / f"c{i}", n, seed=20 + i) for i, n in enumerate((60, 40, 30, 20))
    ]

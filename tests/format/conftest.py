"""Fixtures for the format tests."""

from __future__ import annotations

import pytest
from tests.support.format_files import random_documents, write_dataset


@pytest.fixture
def small_prefix(tmp_path):
    """A uint16 pair of 20 documents; returns (prefix, documents)."""
    documents = random_documents()
    return write_dataset(tmp_path / "small", documents), documents

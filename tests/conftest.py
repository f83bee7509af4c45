"""Shared fixtures: the megatron-core golden vectors live in ../shared (never copied)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.support.golden import GOLDEN_DIR, golden_available


@pytest.fixture(scope="session")
def golden_dir() -> Path:
    if not golden_available():
        pytest.skip(f"golden vectors not found at {GOLDEN_DIR}")
    return GOLDEN_DIR


@pytest.fixture(scope="session")
def golden_manifest(golden_dir: Path) -> dict:
    return json.loads((golden_dir / "manifest.json").read_text())

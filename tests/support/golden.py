"""Where the megatron-core golden vectors live (../shared, never copied) and how to read them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parents[2]
GOLDEN_DIR = (PROJECT_ROOT / ".." / "shared" / "golden" / "megatron-core-0.16.1").resolve()


def golden_available() -> bool:
    return (GOLDEN_DIR / "manifest.json").is_file()


requires_golden = pytest.mark.skipif(
    not golden_available(),
    reason=f"golden vectors not found at {GOLDEN_DIR} (../shared/golden is laid beside the project)",
)


def golden_cases(kind: str) -> list[dict]:
    """Cases of one kind from the manifest (empty when the folder is missing)."""
    if not golden_available():
        return []
    manifest = json.loads((GOLDEN_DIR / "manifest.json").read_text())
    return [case for case in manifest["cases"] if case["kind"] == kind]

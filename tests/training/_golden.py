"""Where the training golden vectors live (``../shared/golden/megatron-training``)."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT.parent / "shared" / "golden" / "megatron-training"


@lru_cache(maxsize=1)
def samplers() -> dict:
    """``samplers.json``, or skip the test when the golden folder is missing."""
    path = GOLDEN / "samplers.json"
    if not path.is_file():
        pytest.skip(
            f"golden vectors not found at {path} (the shared golden folder is "
            "needed next to the repository)"
        )
    return json.loads(path.read_text())


def cases(sampler: str) -> list:
    """The golden cases of one sampler class (empty list when the folder is missing)."""
    path = GOLDEN / "samplers.json"
    if not path.is_file():
        return [
            pytest.param(None, marks=pytest.mark.skip(reason=f"golden vectors missing: {path}"))
        ]
    return [case for case in json.loads(path.read_text())["cases"] if case["sampler"] == sampler]

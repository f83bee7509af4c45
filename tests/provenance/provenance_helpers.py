"""Real corpora built with real tokenizers, shared by tests/provenance and tests/cli."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.support.tokenizer_models import hf_path, real_texts, sentencepiece_path  # noqa: F401

from tokenloom.preprocess import preprocess


def write_jsonl(path: Path, texts: list) -> Path:
    with open(path, "w", encoding="utf-8") as handle:
        for i, text in enumerate(texts):
            handle.write(json.dumps({"text": text, "title": f"document {i}"}) + "\n")
    return path


def build(folder: Path, texts: list, tokenizer: Any, name: str = "out", **kwargs: Any) -> str:
    """Preprocess ``texts`` (as JSONL) into ``folder/name_text_document``; returns that prefix."""
    path = write_jsonl(folder / f"{name}.jsonl", texts)
    kwargs.setdefault("append_eod", True)
    preprocess(str(path), str(folder / name), tokenizer, show_progress=False, **kwargs)
    return str(folder / f"{name}_text_document")


@pytest.fixture(scope="session")
def hf_prefix(tmp_path_factory, real_texts, hf_path) -> str:  # noqa: F811
    """A pair (and its sidecar) made with the Hugging Face BPE tokenizer, with EOD."""
    return build(tmp_path_factory.mktemp("hf_built"), real_texts, f"hf:{hf_path}")


@pytest.fixture(scope="session")
def spm_prefix(tmp_path_factory, real_texts, sentencepiece_path) -> str:  # noqa: F811
    """The same texts made with the SentencePiece tokenizer."""
    return build(
        tmp_path_factory.mktemp("spm_built"), real_texts, f"sentencepiece:{sentencepiece_path}"
    )

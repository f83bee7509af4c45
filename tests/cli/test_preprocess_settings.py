"""The first line of ``tokenloom preprocess``: ``settings:`` names only real differences
from Megatron-LM; what the tokenizer adds to each document is told beside it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tokenloom.cli.main import main

GOLDEN = (
    Path(__file__).resolve().parents[2] / ".." / "shared" / "golden" / "megatron-preprocess"
).resolve()
pytestmark = pytest.mark.skipif(
    not (GOLDEN / "manifest.json").is_file(), reason=f"golden preprocess set not at {GOLDEN}"
)


@pytest.fixture(autouse=True)
def _single_threaded_hf(monkeypatch):
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")


def _first_line(capsys, tmp_path, *flags: str) -> str:
    corpus = GOLDEN / "inputs" / "corpus_missing_title.jsonl"
    code = main(
        ["preprocess", "--input", str(corpus), "--output-prefix", str(tmp_path / "o")]
        + [*flags, "--no-progress"]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    return out.splitlines()[0]


@pytest.mark.parametrize(
    "flags, added",
    [
        ([], "(post-processor adds [1] to every document)"),
        (["--tokenizer-hf-include-special-tokens"], "(post-processor adds [1] to every document)"),
        (["--tokenizer-hf-no-include-special-tokens"], None),
    ],
)
def test_megatron_form_is_as_megatron_whatever_it_adds(capsys, tmp_path, flags, added):
    tokenizer = ["--tokenizer-type", "HuggingFaceTokenizer"]
    model = ["--tokenizer-model", str(GOLDEN / "tokenizers" / "hf_bos")]
    first = _first_line(capsys, tmp_path, *tokenizer, *model, *flags)
    assert first.endswith("; settings: as Megatron-LM"), first
    assert "special tokens" not in first
    assert (added in first) if added else ("adds" not in first), first


def test_legacy_llama2_bos_is_told_but_is_no_difference(capsys, tmp_path):
    model = str(GOLDEN / "tokenizers" / "spm" / "spm.model")
    first = _first_line(
        capsys, tmp_path, "--tokenizer-type", "Llama2Tokenizer", "--tokenizer-model", model
    )
    assert first.endswith("; settings: as Megatron-LM") and "BOS" not in first
    first = _first_line(
        capsys,
        tmp_path,
        "--tokenizer-type",
        "Llama2Tokenizer",
        "--tokenizer-model",
        model,
        "--legacy-tokenizer",
    )
    assert first.endswith("; settings: as Megatron-LM"), first
    assert "(BOS 1 on every document)" in first


def test_the_spec_form_names_its_one_difference_and_policies_name_theirs(capsys, tmp_path):
    spec = f"hf:{GOLDEN / 'tokenizers' / 'hf_bos'}"
    first = _first_line(capsys, tmp_path, "--tokenizer", spec, "--no-add-special-tokens")
    assert first.endswith("; settings: --on-blank-line skip (Megatron stops)"), first
    first = _first_line(
        capsys, tmp_path, "--tokenizer", spec, "--on-empty", "skip", "--on-blank-line", "fail"
    )
    assert first.endswith("; settings: --on-empty skip (Megatron: keep)"), first
    assert "(post-processor adds [1] to every document)" in first
    sidecar = json.loads((tmp_path / "o_text_document.json").read_text())
    assert sidecar["settings"]["add_special_tokens"] is True

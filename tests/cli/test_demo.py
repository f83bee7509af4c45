"""``tokenloom demo`` end to end on a few standard-library modules."""

from __future__ import annotations

import re

import pytest

from tokenloom.cli.main import main
from tokenloom.format import IndexedDataset
from tokenloom.tokenizers import HFTokenizer


@pytest.fixture(autouse=True)
def _single_threaded_hf(monkeypatch):
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")


def test_demo_runs_offline_and_reports(tmp_path, capsys):
    out = tmp_path / "demo"
    code = main(
        [
            "demo",
            "--output-dir",
            str(out),
            "--max-files",
            "12",
            "--vocab-size",
            "600",
            "--sequence-length",
            "32",
        ]
    )
    text = capsys.readouterr().out
    assert code == 0
    for name in ("code", "docs"):
        for ext in (".bin", ".idx"):
            assert (out / "data" / f"{name}_text_document{ext}").is_file()
        assert (out / "corpus" / f"{name}.jsonl").is_file()
    assert (out / "tokenizer.json").is_file()
    assert "documents" in text and "tokens" in text and "tokens/s" in text
    row = re.search(r"^\s+code\s+([\d,]+)\s+([\d,]+)\s", text, re.MULTILINE)
    assert row, text
    tokenizer = HFTokenizer(str(out / "tokenizer.json"))
    with IndexedDataset(str(out / "data" / "code_text_document")) as dataset:
        assert len(dataset) == int(row.group(1).replace(",", ""))
        assert sum(int(n) for n in dataset.sequence_lengths) == int(row.group(2).replace(",", ""))
        first = tokenizer.decode(dataset[0][:-1])
    assert first[:40].replace("\n", "\\n") in text  # decoded documents are shown
    if "blended GPT dataset: skipped" not in text:
        assert "70% code + 30% docs" in text and "loss_mask" in text
        counts = re.search(r"([\d,]+) samples: code ([\d,]+), docs ([\d,]+)", text)
        total, code_n, docs_n = (int(g.replace(",", "")) for g in counts.groups())
        assert code_n + docs_n == total and abs(code_n - 0.7 * total) <= 1
    assert re.search(r"^done in [\d.]+ s", text, re.MULTILINE)


def test_demo_checks_its_options(capsys):
    assert main(["demo", "--vocab-size", "0"]) == 1
    assert "--vocab-size 0" in capsys.readouterr().err

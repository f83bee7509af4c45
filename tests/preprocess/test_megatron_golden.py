"""Every case of ../shared/golden/megatron-preprocess: Megatron's flags give Megatron's bytes.

Each case's exact Megatron command line runs through ``tokenloom preprocess`` from a
folder holding links to the golden inputs and tokenizers (nothing is copied), and the
``.bin``/``.idx`` must be byte-identical to what Megatron-LM wrote.  The two error
cases (where Megatron crashes, then hangs) must give one clear line naming the file,
line and field, exit 1, and write nothing.
"""

from __future__ import annotations

import filecmp
import json
import os
from pathlib import Path

import pytest

from tokenloom.cli.main import main

GOLDEN = (
    Path(__file__).resolve().parents[2] / ".." / "shared" / "golden" / "megatron-preprocess"
).resolve()
_MISSING = f"Megatron preprocess golden set not found at {GOLDEN} (../shared/golden)"


def _cases() -> list:
    if not (GOLDEN / "manifest.json").is_file():
        return []
    return json.loads((GOLDEN / "manifest.json").read_text())["cases"]


CASES = _cases()
requires_golden = pytest.mark.skipif(not CASES, reason=_MISSING)


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A folder laid out like the one Megatron ran in: inputs/, tokenizers/, outputs/."""
    (tmp_path / "inputs").symlink_to(GOLDEN / "inputs")
    (tmp_path / "tokenizers").symlink_to(GOLDEN / "tokenizers")
    (tmp_path / "outputs").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    return tmp_path


def _same(ours: Path, theirs: Path) -> bool:
    return filecmp.cmp(ours, theirs, shallow=False)


def test_the_golden_set_has_all_53_cases():
    if not CASES:
        pytest.skip(_MISSING)
    assert len(CASES) == 53
    assert sum(case["status"] == "error" for case in CASES) == 2


@requires_golden
@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", CASES, ids=[case["id"] for case in CASES])
def test_megatron_command_line_gives_megatron_bytes(workdir, case, capsys):
    code = main(["preprocess", *case["flags"], "--no-progress"])
    captured = capsys.readouterr()
    if case["status"] == "error":
        assert code == 1
        message = captured.err.strip()
        assert len(message.splitlines()) == 1, message
        assert "Traceback" not in captured.err
        assert os.path.basename(case["input"]) in message
        field = "title" if "title" in case["error"]["exception"] else "blank line"
        assert field in message
        assert not list((workdir / "outputs").iterdir())  # nothing published, nothing left
        return
    assert code == 0, captured.err
    for key, expected in case["outputs"].items():
        for ext in ("bin", "idx"):
            ours = workdir / "outputs" / f"{case['id']}_{key}_document.{ext}"
            assert _same(ours, GOLDEN / expected[ext]), f"{case['id']} {key} .{ext} differs"
    first = captured.out.splitlines()[0]  # the same bytes as Megatron: no difference named
    assert first.endswith("; settings: as Megatron-LM"), first
    assert not [p for p in (workdir / "outputs").iterdir() if "partition" in p.name]


@requires_golden
@pytest.mark.parametrize(
    "extra, twin",
    [
        (["--tokenizer-hf-no-include-special-tokens"], "case_13"),  # core_v0.16.1's default
        (["--tokenizer-hf-include-special-tokens"], "case_05"),
        (["--legacy-tokenizer"], "case_05"),
    ],
)
def test_core_v0_16_1_hf_defaults_are_one_flag_away(workdir, extra, twin):
    flags = [
        "--input",
        "inputs/corpus.jsonl",
        "--output-prefix",
        "outputs/x",
        "--tokenizer-type",
        "HuggingFaceTokenizer",
        "--tokenizer-model",
        "tokenizers/hf_bos",
        "--append-eod",
        "--workers",
        "1",
        "--no-progress",
        *extra,
    ]
    assert main(["preprocess", *flags]) == 0
    for ext in ("bin", "idx"):
        assert _same(
            workdir / "outputs" / f"x_text_document.{ext}",
            GOLDEN / "outputs" / f"{twin}_text_document.{ext}",
        )


@requires_golden
def test_spec_form_gives_the_same_bytes_as_megatron_form(workdir):
    """tokenloom's --tokenizer form, with its defaults, writes case_05's bytes (BOS kept)."""
    flags = [
        "--input",
        "inputs/corpus.jsonl",
        "--output-prefix",
        "outputs/spec",
        "--tokenizer",
        "hf:tokenizers/hf_bos",
        "--append-eod",
        "--no-progress",
    ]
    assert main(["preprocess", *flags]) == 0
    for ext in ("bin", "idx"):
        assert _same(
            workdir / "outputs" / f"spec_text_document.{ext}",
            GOLDEN / "outputs" / f"case_05_text_document.{ext}",
        )


@requires_golden
def test_policy_flags_make_megatron_error_cases_run(workdir, capsys):
    """The safe superset: where Megatron hangs, a policy flag skips and counts."""
    flags = [
        "--input",
        "inputs/corpus_blank_line.jsonl",
        "--output-prefix",
        "outputs/b",
        "--tokenizer-type",
        "HuggingFaceTokenizer",
        "--tokenizer-model",
        "tokenizers/hf_plain",
        "--append-eod",
        "--workers",
        "1",
        "--no-progress",
        "--on-blank-line",
        "skip",
    ]
    assert main(["preprocess", *flags]) == 0
    out = capsys.readouterr().out
    assert "--on-blank-line skip (Megatron stops)" in out.splitlines()[0]
    assert "1 blank line" in out

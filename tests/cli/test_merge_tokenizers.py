"""`tokenloom merge` refuses to mix tokenizers (naming both) unless asked, and gives the
merged pair a sidecar; pairs without one (Megatron's) still merge."""

from __future__ import annotations

import json
import os

import numpy
from tests.provenance.provenance_helpers import build, hf_prefix, spm_prefix  # noqa: F401
from tests.support.tokenizer_models import hf_path, real_texts, sentencepiece_path  # noqa: F401

from tokenloom.cli.main import main
from tokenloom.format import IndexedDataset, IndexedDatasetBuilder
from tokenloom.provenance import read_sidecar, stale_problems


def _documents(prefix: str) -> list:
    with IndexedDataset(prefix) as dataset:
        return [dataset[i].tolist() for i in range(len(dataset))]


def test_same_tokenizer_merges_with_a_sidecar(tmp_path, real_texts, hf_path, capsys):  # noqa: F811
    a = build(tmp_path, real_texts[:4], f"hf:{hf_path}", name="a")
    b = build(tmp_path, real_texts[4:9], f"hf:{hf_path}", name="b")
    out = str(tmp_path / "ab")
    assert main(["merge", "--no-progress", "--output-prefix", out, a, b]) == 0
    assert _documents(out) == _documents(a) + _documents(b)
    record = read_sidecar(out)
    assert record["tokenizer"] == read_sidecar(a)["tokenizer"]
    assert [part["prefix"] for part in record["merged_from"]] == [a, b]
    assert record["counts"]["documents"] == 9 and stale_problems(out, record) == []
    assert [entry["path"] for entry in record["inputs"]] == [
        read_sidecar(a)["inputs"][0]["path"],
        read_sidecar(b)["inputs"][0]["path"],
    ]
    assert capsys.readouterr().err == ""


def test_different_tokenizers_are_refused_naming_both(
    tmp_path,
    hf_prefix,
    spm_prefix,  # noqa: F811
    capsys,
):
    out = str(tmp_path / "mixed")
    assert main(["merge", "--no-progress", "--output-prefix", out, hf_prefix, spm_prefix]) == 1
    err = capsys.readouterr().err
    assert "refusing to merge" in err and "--allow-mixed-tokenizers" in err
    assert f"{hf_prefix} was tokenized with HFTokenizer tokenizer.json sha256" in err
    assert f"but {spm_prefix} with SentencePieceTokenizer spm.model sha256" in err
    assert not [name for name in os.listdir(tmp_path) if name.startswith("mixed")]


def test_allow_mixed_tokenizers(tmp_path, hf_prefix, spm_prefix, capsys):  # noqa: F811
    out = str(tmp_path / "mixed")
    assert (
        main(
            [
                "merge",
                "--no-progress",
                "--allow-mixed-tokenizers",
                "--output-prefix",
                out,
                hf_prefix,
                spm_prefix,
            ]
        )
        == 0
    )
    assert "warning: mixing tokenizers" in capsys.readouterr().err
    assert _documents(out) == _documents(hf_prefix) + _documents(spm_prefix)
    identity = read_sidecar(out)["tokenizer"]
    assert identity["kind"] == "mixed"
    assert [part["kind"] for part in identity["parts"]] == ["HFTokenizer", "SentencePieceTokenizer"]
    again = str(tmp_path / "again")  # a mixed pair is mixing again, with anything
    assert main(["merge", "--no-progress", "--output-prefix", again, out, hf_prefix]) == 1
    assert "with mixed tokenizers (HFTokenizer" in capsys.readouterr().err


def test_megatron_pairs_without_sidecar_merge_with_a_note(tmp_path, hf_prefix, capsys):  # noqa: F811
    plain = str(tmp_path / "megatron")
    builder = IndexedDatasetBuilder(plain + ".bin", dtype=numpy.uint16)
    builder.add_document(numpy.array([5, 6, 7]), [3])
    builder.finalize(plain + ".idx")
    out = str(tmp_path / "out")
    assert main(["merge", "--no-progress", "--output-prefix", out, hf_prefix, plain]) == 0
    assert f"{plain}: no provenance sidecar (a Megatron-built pair?)" in capsys.readouterr().err
    record = read_sidecar(out)
    assert record["tokenizer"] is None and record["merged_from"][1]["has_sidecar"] is False
    assert _documents(out)[-1] == [5, 6, 7]
    # the merged pair's sidecar names no tokenizer: merging it again is not checked, not refused
    assert (
        main(["merge", "--no-progress", "--output-prefix", str(tmp_path / "o2"), out, hf_prefix])
        == 0
    )
    assert "names no single tokenizer" in capsys.readouterr().err


def test_special_token_setting_difference_is_a_note(tmp_path, real_texts, hf_path, capsys):  # noqa: F811
    from tokenloom.tokenizers import load_tokenizer

    a = build(tmp_path, real_texts[:2], load_tokenizer(f"hf:{hf_path}"), name="a")
    b = build(
        tmp_path,
        real_texts[:2],
        load_tokenizer(f"hf:{hf_path}", add_special_tokens=False),
        name="b",
    )
    assert main(["merge", "--no-progress", "--output-prefix", str(tmp_path / "o"), a, b]) == 0
    assert "has add_special_tokens=False but" in capsys.readouterr().err
    assert json.loads(open(str(tmp_path / "o.json")).read())["tokenizer"]["kind"] == "HFTokenizer"

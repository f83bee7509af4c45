"""`tokenloom inspect`: the sidecar, decoded documents (--tokenizer --show) and --plot."""

from __future__ import annotations

import json
import os
import shutil

import numpy
import pytest
from tests.provenance.provenance_helpers import hf_prefix, spm_prefix  # noqa: F401
from tests.support.tokenizer_models import hf_path, real_texts, sentencepiece_path  # noqa: F401

from tokenloom.cli.main import main
from tokenloom.format import IndexedDatasetBuilder


def test_inspect_shows_the_sidecar(hf_prefix, hf_path, capsys):  # noqa: F811
    assert main(["inspect", hf_prefix]) == 0
    out = capsys.readouterr().out
    assert f"provenance: {hf_prefix}.json (tokenloom " in out
    assert "tokenizer:  HFTokenizer tokenizer.json sha256 " in out and "(vocab 600)" in out
    assert "special tokens <|endoftext|>=0" in out
    assert (
        "settings:   key 'text', document level, append EOD yes (id 0), special tokens "
        "added yes" in out
    )
    assert "file: " in out and "out.jsonl sha256 " in out
    assert main(["inspect", hf_prefix, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["provenance"]["tokenizer"]["kind"] == "HFTokenizer"
    assert report["provenance"]["counts"]["documents"] == report["document_count"]


def test_megatron_pair_has_no_sidecar_and_inspects_fine(tmp_path, capsys):
    builder = IndexedDatasetBuilder(str(tmp_path / "m.bin"), dtype=numpy.uint16)
    builder.add_document(numpy.array([1, 2, 3]), [3])
    builder.finalize(str(tmp_path / "m.idx"))
    assert main(["inspect", str(tmp_path / "m"), "--show", "1"]) == 0
    out = capsys.readouterr().out
    assert "provenance: none (" in out and "m.json absent" in out
    assert "[0] (3 tokens) [1, 2, 3]" in out and "no --tokenizer and no sidecar" in out


def test_show_decodes_documents(hf_prefix, hf_path, real_texts, capsys):  # noqa: F811
    assert (
        main(
            [
                "inspect",
                hf_prefix,
                "--tokenizer",
                f"hf:{hf_path}",
                "--show",
                "3",
                "--show-chars",
                "0",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert f"decoded:    decoded with hf:{hf_path}" in out
    for i in range(3):
        assert f"--- document {i} (" in out
        assert real_texts[i] + "<|endoftext|>" in out  # the BPE round-trips the text exactly
    assert "--- document 3 (" not in out
    assert main(["inspect", hf_prefix, "--show", "1", "--show-chars", "50", "--json"]) == 0
    [row] = json.loads(capsys.readouterr().out)["documents"]  # the sidecar's tokenizer
    assert row["text"].startswith(real_texts[0][:50]) and "more characters]" in row["text"]


def test_show_explains_a_moved_tokenizer(tmp_path, hf_prefix, capsys):  # noqa: F811
    prefix = str(tmp_path / "copy")
    for suffix in (".bin", ".idx"):
        shutil.copy(hf_prefix + suffix, prefix + suffix)
    record = json.loads(open(hf_prefix + ".json").read())
    record["tokenizer"]["files"] = [str(tmp_path / "gone" / "tokenizer.json")]
    with open(prefix + ".json", "w") as handle:
        json.dump(record, handle)
    assert main(["inspect", prefix, "--show", "1"]) == 0
    out = capsys.readouterr().out
    assert "cannot be loaded here: give --tokenizer SPEC" in out and "[0] (" in out


def _read_png(path):
    image = pytest.importorskip("matplotlib.image").imread(path)
    return image[..., :3]


def test_plot_compares_prefixes(tmp_path, hf_prefix, spm_prefix, capsys):  # noqa: F811
    out = tmp_path / "plots" / "look.png"
    assert main(["inspect", hf_prefix, spm_prefix, "--plot", str(out)]) == 0
    text = capsys.readouterr().out
    assert f"plot:       {out}" in text and text.count("integrity:  OK") == 2
    image = _read_png(out)
    assert image.shape == (450, 1500, 3)
    assert float(image.var()) > 0.005  # not blank
    ink = (image.min(axis=2) < 0.5).mean(axis=0)  # share of dark pixels per column
    thirds = [ink[i * 500 : (i + 1) * 500].sum() for i in range(3)]
    assert min(thirds) > 5  # every panel has axes, curves and labels drawn
    colours = image.reshape(-1, 3)
    blue = ((colours[:, 2] > 0.6) & (colours[:, 0] < 0.3)).sum()  # first prefix's curve
    orange = ((colours[:, 0] > 0.9) & (colours[:, 2] < 0.3)).sum()  # second prefix's curve
    assert blue > 200 and orange > 200
    single = tmp_path / "one.png"
    assert main(["inspect", hf_prefix, "--plot", str(single)]) == 0
    colours = _read_png(single).reshape(-1, 3)
    assert ((colours[:, 0] > 0.9) & (colours[:, 2] < 0.3)).sum() < 50  # no second curve


def test_plot_samples_large_files(tmp_path, hf_prefix, capsys):  # noqa: F811
    out = tmp_path / "few.png"
    assert (
        main(["inspect", hf_prefix, "--plot", str(out), "--plot-max-tokens", "10", "--json"]) == 0
    )
    sampled = json.loads(capsys.readouterr().out)["plot"]["sampled_tokens"]
    assert list(sampled.values()) == [10]  # of the file's 27,000-odd tokens
    assert os.path.getsize(out) > 10_000


def test_bad_arguments(hf_prefix, tmp_path, capsys):  # noqa: F811
    assert main(["inspect", hf_prefix, "--plot", str(tmp_path / "x.unknown")]) == 1
    assert "use a .png" in capsys.readouterr().err
    assert not (tmp_path / "x.unknown").exists()
    assert main(["inspect", hf_prefix, "--tokenizer", "bytes"]) == 1
    assert "add --show N" in capsys.readouterr().err


def test_token_sample_of_a_large_file_spans_it(tmp_path):
    from tokenloom.cli._look import sampled_tokens
    from tokenloom.format import IndexedDataset

    total = 300_000
    builder = IndexedDatasetBuilder(str(tmp_path / "big.bin"), dtype=numpy.int32)
    builder.add_document(numpy.arange(total, dtype=numpy.int32), [total])
    builder.finalize(str(tmp_path / "big.idx"))
    with IndexedDataset(str(tmp_path / "big")) as dataset:
        sample = sampled_tokens(dataset, 140_000)  # two blocks of 64Ki: the start and the end
        assert sample.shape == (2 << 16,)
        assert sample[0] == 0 and sample[-1] == total - 1
        assert numpy.array_equal(sampled_tokens(dataset, total), numpy.arange(total))


@pytest.mark.timeout(60)
def test_a_sidecar_naming_a_huge_tokenizer_file_is_not_hashed(hf_prefix, tmp_path, capsys):  # noqa: F811
    """A crafted sidecar may name any file as its tokenizer: a sparse 1 TiB file costs
    nothing to plant and an hour to hash; it is refused by its size instead."""
    for ext in (".bin", ".idx"):
        shutil.copyfile(hf_prefix + ext, tmp_path / f"p{ext}")
    record = json.loads(open(hf_prefix + ".json").read())
    huge = tmp_path / "tokenizer.json"
    with open(huge, "wb") as handle:
        handle.truncate(1 << 40)
    record["tokenizer"]["files"] = [str(huge)]
    (tmp_path / "p.json").write_text(json.dumps(record))
    assert main(["inspect", str(tmp_path / "p"), "--show", "1"]) == 0
    out = capsys.readouterr().out
    assert f"{huge} is too large for a tokenizer file: give --tokenizer SPEC" in out

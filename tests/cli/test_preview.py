"""`tokenloom preview --config`: sources with their epochs and repetitions (a loud warning
for heavy repetition), and decoded samples with document boundaries and the loss mask."""

from __future__ import annotations

import json
import re

import numpy
from tests.provenance.provenance_helpers import build
from tests.support.tokenizer_models import hf_path, real_texts  # noqa: F401

from tokenloom.cli.main import main
from tokenloom.cli.preview import sample_segments


def _config(tmp_path, prefixes, weights, **extra) -> str:
    blend = [str(v) for pair in zip(weights, prefixes) for v in pair]
    config = {
        "data_path": blend,
        "split": "100,0,0",
        "seq_length": 64,
        "seed": 1234,
        "data_cache_path": str(tmp_path / "cache"),
        "train_iters": 50,
        "eval_interval": 1000,
        "eval_iters": 0,
        "global_batch_size": 8,
        **extra,
    }
    path = tmp_path / "train.json"
    path.write_text(json.dumps(config))
    return str(path)


def _corpora(tmp_path, real_texts, hf_path):  # noqa: F811
    big = build(tmp_path, real_texts, f"hf:{hf_path}", name="big")
    small = build(tmp_path, [text[:80] for text in real_texts[:6]], f"hf:{hf_path}", name="small")
    return big, small


def test_preview_sources_warning_and_samples(tmp_path, real_texts, hf_path, capsys):  # noqa: F811
    big, small = _corpora(tmp_path, real_texts, hf_path)
    config = _config(tmp_path, [big, small], [0.7, 0.3], eod_mask_loss=True)
    assert main(["preview", "--config", config, "--samples", "6", "--chars", "0"]) == 0
    captured = capsys.readouterr()
    out = captured.out
    assert "tokenizer:           decoded with the sidecar's tokenizer" in out  # vocab, eod from it
    assert "train split: 400 samples of 64 tokens from 2 source(s)" in out
    big_row = next(line for line in out.splitlines() if line.rstrip().endswith(big))
    small_row = next(line for line in out.splitlines() if small in line and "REPEATED" in line)
    assert "REPEATED" not in big_row
    repeats = float(re.search(r"([\d.]+)x", small_row).group(1))
    assert repeats > 4  # 120 samples of 64 tokens from a few hundred tokens
    assert f"WARNING: {small} is repeated {repeats:.1f} times in the train split" in out
    assert f"tokenloom preview: WARNING: {small} is repeated" in captured.err
    samples = out.split("=== sample ")[1:]
    assert len(samples) == 6
    texts = "".join(real_texts)
    for sample in samples:
        header, *lines = sample.splitlines()
        assert re.match(
            r"\d+ -> .*(big|small)_text_document sample \d+ \(64 tokens, \d+ "
            r"document piece\(s\); loss mask keeps \d+/64 labels\) ===",
            header,
        )
        pieces = [line for line in lines if not line.startswith("|--- document")]
        for piece in pieces:  # every decoded piece is real text (EOD and masks aside)
            plain = re.sub(r"\[MASKED: (.*?)\]", r"\1", piece, flags=re.S)
            for chunk in plain.split("<|endoftext|>"):
                assert chunk.strip() == "" or chunk.strip() in texts
    assert "[MASKED: " in out  # eod_mask_loss drops the label after every EOD


def test_segments_rebuild_every_sample(tmp_path, real_texts, hf_path):  # noqa: F811
    from tokenloom.builder import BlendedMegatronDatasetBuilder
    from tokenloom.cli.prepare_cache import compute_plan, load_settings_file, make_config
    from tokenloom.datasets import GPTDataset

    big, small = _corpora(tmp_path, real_texts, hf_path)
    settings = load_settings_file(
        _config(tmp_path, [big, small], [0.5, 0.5], vocab_size=600, eod=0)
    )
    blend, _, _ = BlendedMegatronDatasetBuilder(
        GPTDataset, compute_plan(settings).sizes, lambda: True, make_config(settings)
    ).build()
    for part in blend.datasets:
        for i in range(len(part)):
            segments = sample_segments(part, i)
            window = numpy.concatenate([part.dataset.get(d, o, n) for d, o, n in segments])
            assert window.shape[0] == 65 and numpy.array_equal(window[:64], part[i]["tokens"])
            assert numpy.array_equal(window[1:], part[i]["labels"])


def test_preview_without_tokenizer_needs_vocab(tmp_path, capsys):
    config = _config(tmp_path, [str(tmp_path / "nothing")], [1.0])
    assert main(["preview", "--config", config]) == 1
    assert "--vocab-size" in capsys.readouterr().err

"""`tokenloom prepare-cache` takes the tokenizer as `preprocess` does (Megatron's flags or
--tokenizer SPEC) or infers vocab_size/eod/pad from the provenance sidecars (as
`preview` does), and the caches it builds are the ones preview and the run then use."""

from __future__ import annotations

import json

import pytest
from tests.support.tokenizer_models import hf_path, real_texts  # noqa: F401

from tokenloom.cache import IndexCache
from tokenloom.cli import prepare_cache
from tokenloom.cli.main import main
from tokenloom.provenance import read_sidecar

PLAN = [
    "--split", "100,0,0", "--seq-length", "32", "--train-iters", "6",
    "--eval-interval", "100", "--eval-iters", "0", "--global-batch-size", "4",
]  # fmt: skip


def _preprocess(tmp_path, name, texts, *tokenizer):
    source = tmp_path / f"{name}.jsonl"
    source.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    argv = ["preprocess", "--input", str(source), "--output-prefix", str(tmp_path / name)]
    assert main([*argv, *tokenizer, "--append-eod", "--no-progress"]) == 0
    return str(tmp_path / f"{name}_text_document")


def _megatron_hf(path):
    return ["--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", path]


def _stems(cache):
    return sorted(IndexCache(str(cache)).stems())


def _settings(prefix, cache, **extra):
    settings = prepare_cache.canonical_settings(
        {
            "data_path": [prefix],
            "split": "100,0,0",
            "seq_length": 32,
            "data_cache_path": str(cache),
            "train_iters": 6,
            "eval_interval": 100,
            "eval_iters": 0,
            "global_batch_size": 4,
            **extra,
        },
        source="test",
    )
    return settings


def test_vocab_eod_and_pad_come_from_the_sidecar_and_preview_reuses_the_caches(
    tmp_path,
    real_texts,  # noqa: F811
    hf_path,  # noqa: F811
    capsys,
):
    prefix = _preprocess(tmp_path, "web", real_texts, *_megatron_hf(hf_path))
    cache = tmp_path / "cache"
    argv = ["prepare-cache", "--data-path", prefix, "--data-cache-path", str(cache), *PLAN]
    assert main(argv) == 0
    built = _stems(cache)
    assert built and "done:" in capsys.readouterr().out
    identity = read_sidecar(prefix)["tokenizer"]
    tokenizer = prepare_cache.make_config(_settings(prefix, cache)).tokenizer
    assert (tokenizer.vocab_size, tokenizer.eod, tokenizer.pad) == (
        identity["vocab_size"],
        identity["eod"],
        identity["pad"],
    )
    config = tmp_path / "train.json"
    config.write_text(json.dumps(_settings(prefix, cache) | {"data_path": [prefix]}))
    assert main(["preview", "--config", str(config), "--samples", "1"]) == 0
    assert _stems(cache) == built  # preview found every cache prepare-cache built


def test_megatron_tokenizer_flags_build_the_tokenizer_preprocess_built(
    tmp_path,
    real_texts,  # noqa: F811
    hf_path,  # noqa: F811
):
    from tokenloom.builder import BlendedMegatronDatasetBuilder
    from tokenloom.datasets import GPTDataset, GPTDatasetConfig
    from tokenloom.tokenizers.megatron import MegatronTokenizerArgs, build_megatron_tokenizer

    prefix = _preprocess(tmp_path, "web", real_texts, *_megatron_hf(hf_path))
    cache = tmp_path / "cache"
    argv = ["prepare-cache", "--data-path", prefix, "--data-cache-path", str(cache), *PLAN]
    assert main([*argv, *_megatron_hf(hf_path)]) == 0
    built = _stems(cache)
    settings = _settings(prefix, cache, tokenizer_type="HuggingFaceTokenizer")
    settings["tokenizer_model"] = hf_path
    tokenizer = prepare_cache.make_config(settings).tokenizer
    assert tokenizer.identity() == read_sidecar(prefix)["tokenizer"]
    # the run, with the same Megatron tokenizer arguments, builds nothing new
    run_tokenizer = build_megatron_tokenizer(
        MegatronTokenizerArgs("HuggingFaceTokenizer", tokenizer_model=hf_path)
    )
    config = GPTDatasetConfig(
        random_seed=1234,
        sequence_length=32,
        blend=([prefix], None),
        split="100,0,0",
        path_to_cache=str(cache),
        tokenizer=run_tokenizer,
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
    )
    BlendedMegatronDatasetBuilder(GPTDataset, [24, 0, 0], lambda: True, config).build()
    assert _stems(cache) == built


def test_config_file_with_megatron_tokenizer_names(tmp_path, hf_path, capsys):  # noqa: F811
    config = tmp_path / "train.yaml"
    config.write_text(
        f"data_path: [a]\nsplit: '1'\nseq_length: 8\ndata_cache_path: c\n"
        f"tokenizer_type: HuggingFaceTokenizer\ntokenizer_model: {hf_path}\n"
        "tokenizer_hf_include_special_tokens: false\n"
        "train_iters: 2\neval_interval: 1\neval_iters: 1\nglobal_batch_size: 2\n"
    )
    settings = prepare_cache.load_settings_file(str(config))
    assert settings["special_tokens"] is False and settings["tokenizer_type"]
    tokenizer = prepare_cache.make_config(settings).tokenizer
    assert tokenizer.identity()["add_special_tokens"] is False
    assert main(["prepare-cache", "--config", str(config), "--dry-run"]) == 0


def test_errors_name_the_way_out(tmp_path, real_texts, hf_path, capsys):  # noqa: F811
    web = _preprocess(tmp_path, "web", real_texts[:4], *_megatron_hf(hf_path))
    raw = _preprocess(tmp_path, "raw", real_texts[:4], "--tokenizer", "bytes")
    base = ["prepare-cache", "--data-cache-path", str(tmp_path / "c"), *PLAN]
    cases = [
        (["--data-path", web, *_megatron_hf(hf_path), "--eod", "1"], "--eod cannot be combined"),
        (["--data-path", web, "--tokenizer", "bytes", "--vocab-size", "9"], "--vocab-size belongs"),
        (["--data-path", web, raw], "the provenance sidecars disagree"),
        (["--data-path", str(tmp_path / "none")], "--tokenizer-type"),
        (["--data-path", web, "--tokenizer-type", "HuggingFaceTokenizr"], "did you mean"),
    ]
    for extra, message in cases:
        assert main([*base, *extra]) == 1, extra
        err = capsys.readouterr().err
        assert err.startswith("tokenloom prepare-cache: error:") and message in err, err
    # explicit ids win over disagreeing sidecars
    assert main([*base, "--data-path", web, raw, "--vocab-size", "70000", "--eod", "1"]) == 0


def test_help_lists_megatron_tokenizer_flags(capsys):
    with pytest.raises(SystemExit):
        main(["prepare-cache", "--help"])
    text = capsys.readouterr().out
    for flag in ("--tokenizer-type", "--tokenizer-model", "--vocab-file", "--merge-file",
                 "--vocab-size", "--tokenizer-hf-include-special-tokens", "provenance"):  # fmt: skip
        assert flag in text

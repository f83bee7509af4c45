"""`tokenloom prepare-cache`: the training plan, the offline build, and its errors."""

from __future__ import annotations

import json

import pytest

from tokenloom.builder import BlendedMegatronDatasetBuilder
from tokenloom.cli import prepare_cache
from tokenloom.cli.main import main
from tokenloom.datasets import GPTDataset


def _run(*argv):
    return main(["prepare-cache", *map(str, argv)])


def _lines(text: str) -> dict:
    return {
        line.split(":", 1)[0].strip(): line.split(":", 1)[1].strip()
        for line in text.splitlines()
        if ":" in line
    }


def test_plan_follows_megatron_training_arithmetic(tmp_path, capsys):
    argv = [
        "--dry-run",
        "--data-path",
        "some/prefix",
        "--split",
        "98,2,0",
        "--seq-length",
        "64",
        "--vocab-size",
        "32000",
        "--eod",
        "2",
        "--data-cache-path",
        tmp_path / "cache",
        "--world-size",
        16,
        "--tensor-model-parallel-size",
        2,
        "--pipeline-model-parallel-size",
        2,
        "--micro-batch-size",
        3,
        "--train-iters",
        100,
        "--eval-interval",
        30,
        "--eval-iters",
        2,
    ]
    assert _run(*argv) == 0
    out = _lines(capsys.readouterr().out)
    assert out["world size"] == "16"
    assert out["data-parallel size"].startswith("4 ")
    assert out["global batch size"] == "12"  # micro batch 3 x data-parallel 4
    assert out["cache path"] == str(tmp_path / "cache")
    # train 100*12, valid (100//30+1)*2*12, test 2*12
    assert out["target samples"] == "train 1200 | valid 96 | test 24"
    assert not (tmp_path / "cache").exists()


def test_yaml_config_with_megatron_names_and_flag_override(tmp_path, capsys):
    config = tmp_path / "train.yaml"
    config.write_text(
        "data_path: [a, b]\nsplit: '90,10,0'\nseq_length: 32\nseed: 7\n"
        "data_cache_path: cache\ntokenizer: {vocab_size: 100, eod: 1}\n"
        "train_iters: 10\neval_interval: 5\neval_iters: 1\nglobal_batch_size: 8\n"
        "full_validation: true\n"
    )
    assert _run("--config", config, "--global-batch-size", 4, "--dry-run") == 0
    assert _lines(capsys.readouterr().out)["target samples"] == "train 40 | valid None | test 4"


@pytest.fixture
def per_split_config(golden_dir, tmp_path):
    corpora = golden_dir / "corpora"
    config = {
        "per_split_data_args_path": {
            "train": ["0.6", str(corpora / "c0"), "0.4", str(corpora / "c1")],
            "valid": [str(corpora / "c2")],
            "test": [str(corpora / "c1"), str(corpora / "c2")],
        },
        "seq_length": 48,
        "seed": 99,
        "data_cache_path": str(tmp_path / "cache"),
        "vocab_size": 32000,
        "eod": 2,
        "train_iters": 25,
        "eval_interval": 10,
        "eval_iters": 2,
        "global_batch_size": 8,
        "num_dataset_builder_threads": 2,
    }
    path = tmp_path / "train.json"
    path.write_text(json.dumps(config))
    return path


def test_prepares_every_cache_the_run_needs(per_split_config, capsys, monkeypatch):
    assert _run("--config", per_split_config) == 0
    out = _lines(capsys.readouterr().out)
    assert out["target samples"] == "train 200 | valid 48 | test 16"
    assert out["train"] == "BlendedDataset of 2 datasets, 200 samples"
    assert out["valid"].startswith("GPTDataset") and out["test"].startswith("BlendedDataset")
    assert out["done"].startswith("7 cached index sets")

    # the training run now finds everything: building anything would fail
    from tokenloom.cache import IndexCache

    def refuse(*args, **kwargs):
        raise AssertionError("prepare-cache missed a cache")

    monkeypatch.setattr(IndexCache, "store", refuse)
    settings = prepare_cache.load_settings_file(str(per_split_config))
    plan = prepare_cache.compute_plan(settings)
    config = prepare_cache.make_config(settings)
    train, valid, test = BlendedMegatronDatasetBuilder(
        GPTDataset, plan.sizes, lambda: True, config
    ).build()
    assert len(train) == 200 and len(valid) >= 48 and len(test) == 16


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--seq-length", 8, "--vocab-size", 9, "--eod", 1, "--train-iters", 1], "mock data"),
        (
            [
                "--data-path",
                "a",
                "--split",
                "1",
                "--seq-length",
                8,
                "--vocab-size",
                9,
                "--eod",
                1,
                "--train-iters",
                1,
                "--eval-interval",
                1,
                "--global-batch-size",
                2,
            ],
            "--data-cache-path",
        ),
        (
            [
                "--data-path",
                "a",
                "--split",
                "1",
                "--seq-length",
                8,
                "--data-cache-path",
                "c",
                "--train-iters",
                1,
            ],
            "--vocab-size",
        ),
        (
            [
                "--data-path",
                "a",
                "--split",
                "1",
                "--seq-length",
                8,
                "--vocab-size",
                9,
                "--eod",
                1,
                "--data-cache-path",
                "c",
                "--train-iters",
                1,
                "--eval-interval",
                1,
                "--global-batch-size",
                2,
                "--world-size",
                6,
                "--tensor-model-parallel-size",
                4,
            ],
            "not divisible",
        ),
        (
            [
                "--data-path",
                "a",
                "--split",
                "1",
                "--seq-length",
                8,
                "--vocab-size",
                9,
                "--eod",
                1,
                "--data-cache-path",
                "c",
                "--eval-interval",
                1,
                "--global-batch-size",
                2,
            ],
            "train_iters",
        ),
        (
            [
                "--data-path",
                "a",
                "--split",
                "1",
                "--seq-length",
                8,
                "--vocab-size",
                9,
                "--eod",
                1,
                "--data-cache-path",
                "c",
                "--train-iters",
                4,
                "--eval-interval",
                1,
            ],
            "global_batch_size",
        ),
    ],
)
def test_bad_settings_are_clear_errors(tmp_path, capsys, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    assert _run("--dry-run", *argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("tokenloom prepare-cache: error:") and message in err


def test_unknown_and_unreadable_config(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"data_path": ["a"], "sequence_lenght": 4}))
    assert _run("--config", bad, "--dry-run") == 1
    assert "unknown setting 'sequence_lenght'" in capsys.readouterr().err
    bad.write_text("{oops")
    assert _run("--config", bad) == 1
    assert "invalid JSON" in capsys.readouterr().err
    assert _run("--config", tmp_path / "missing.json") == 1
    assert "cannot read" in capsys.readouterr().err


def test_help_teaches(capsys):
    with pytest.raises(SystemExit):
        main(["prepare-cache", "--help"])
    text = capsys.readouterr().out
    for needle in (
        "train_iters // eval_interval + 1",
        "data-parallel size",
        "example",
        "--data-cache-path",
        "--prepare-cache-world-size",
        "Mock data",
    ):
        assert needle in text


def _schedule_config(golden_dir, tmp_path, cap):
    corpora = golden_dir / "corpora"
    config = {
        "data_path": ["1", str(corpora / "c0"), "1", str(corpora / "c1")],
        "split": "100,0,0",
        "seq_length": 48,
        "data_cache_path": str(tmp_path / "cache"),
        "vocab_size": 32000,
        "eod": 2,
        "train_iters": 25,
        "eval_interval": 10,
        "eval_iters": 0,
        "global_batch_size": 8,
        "blend_schedule": [[0, [3, 1]], [80, [1, 3], "linear"], [160, [1, 1]]],
        "max-epochs-per-source": cap,
    }
    path = tmp_path / "train.json"
    path.write_text(json.dumps(config))
    return path


def test_config_file_carries_schedule_and_cap_into_the_build(golden_dir, tmp_path, capsys):
    path = _schedule_config(golden_dir, tmp_path, [100, 100])
    config = prepare_cache.make_config(prepare_cache.load_settings_file(str(path)))
    assert [tuple(p) for p in config.blend_schedule][1][2] == "linear"
    assert list(config.max_epochs_per_source) == [100, 100]
    assert _run("--config", path) == 0
    capsys.readouterr()
    # a cap the schedule passes: the build refuses, naming the cap
    assert _run("--config", _schedule_config(golden_dir, tmp_path, 0.001)) == 1
    assert "past max_epochs_per_source=0.001: it passes the cap" in capsys.readouterr().err


def _change_files(golden_dir, tmp_path):
    corpora = golden_dir / "corpora"
    c0, c1, c2 = (str(corpora / f"c{i}") for i in range(3))
    common = {
        "split": "100,0,0",
        "seq_length": 48,
        "data_cache_path": str(tmp_path / "cache"),
        "vocab_size": 32000,
        "eod": 2,
        "eval_iters": 0,
        "eval_interval": 10,
        "global_batch_size": 8,
    }
    new = {**common, "data_path": ["1", c0, "3", c2], "train_iters": 30}
    change = {
        "allow_mixture_change": True,
        "consumed_samples": 80,
        "old": {"data_path": ["1", c0, "1", c1], "train_iters": 20, "global_batch_size": 8},
    }
    paths = tmp_path / "new.json", tmp_path / "change.json"
    paths[0].write_text(json.dumps(new))
    paths[1].write_text(json.dumps(change))
    return (*paths, c0, c1, c2)


def test_mixture_change_prepares_the_old_caches_too(golden_dir, tmp_path, capsys, monkeypatch):
    """The continued run's build (old blend + new) then finds every cache ready."""
    from tokenloom.cache import IndexCache
    from tokenloom.training.megatron_resume import (
        ENVIRONMENT_VARIABLE,
        continue_train,
        old_config,
        read_mixture_change,
    )

    new, change, c0, c1, c2 = _change_files(golden_dir, tmp_path)
    assert _run("--config", new, "--mixture-change", change, "--dry-run") == 0
    out = capsys.readouterr().out
    assert "the old run consumed 80 of its 160 train samples" in out
    assert not (tmp_path / "cache").exists()
    assert _run("--config", new, "--mixture-change", change) == 0
    out = capsys.readouterr().out
    stems = set(IndexCache(str(tmp_path / "cache")).stems())
    assert f"{c1}: stops (after" in out and f"{c2}: starts (at sample 0)" in out
    assert f"{c0}: continues (from sample" in out
    assert (
        "continued train:     240 samples (the first 80 the old blend's, then 160 of the new" in out
    )
    settings = prepare_cache.load_settings_file(str(new))
    config = prepare_cache.make_config(settings)
    built = BlendedMegatronDatasetBuilder(GPTDataset, [240, 0, 0], lambda: True, config).build()
    parsed = read_mixture_change(str(change))
    old = BlendedMegatronDatasetBuilder(
        GPTDataset, [160, 0, 0], lambda: True, old_config(parsed, config)
    ).build()[0]
    assert len(continue_train(parsed, old, built[0], config)) == 240
    assert set(IndexCache(str(tmp_path / "cache")).stems()) == stems  # nothing new built
    # a bad change file fails the command, naming the field
    change.write_text(json.dumps({"consumed_samples": 80, "old": {}}))
    assert _run("--config", new, "--mixture-change", change) == 1
    assert "allow_mixture_change=None: a resume with a changed mixture is refused by default" in (
        capsys.readouterr().err
    )
    monkeypatch.delenv(ENVIRONMENT_VARIABLE, raising=False)


def test_preview_shows_the_continued_train_split(golden_dir, tmp_path, capsys):
    new, change, c0, c1, c2 = _change_files(golden_dir, tmp_path)
    config = json.loads(new.read_text())
    config["mixture_change"] = str(change)
    new.write_text(json.dumps(config))
    assert main(["preview", "--config", str(new), "--samples", "3", "--chars", "20"]) == 0
    out = capsys.readouterr().out
    assert f"{c0}: continues (from sample" in out and f"{c1}: stops (after" in out
    shown = [int(line.split()[2]) for line in out.splitlines() if line.startswith("=== sample")]
    assert len(shown) == 3 and all(k >= 80 for k in shown)  # what the resumed run reads
    assert out.count("(continued)") == 3


def test_a_new_schedule_after_a_mixture_change(golden_dir, tmp_path, capsys):
    """The new config's blend_schedule (the resume at 80 inside its ramp) is continued."""
    new, change, c0, c1, c2 = _change_files(golden_dir, tmp_path)
    config = json.loads(new.read_text())
    config["blend_schedule"] = [[0, [1, 1]], [60, [1, 3], "linear"], [200, [3, 1]]]
    config["mixture_change"] = str(change)
    new.write_text(json.dumps(config))
    assert _run("--config", new) == 0
    assert f"{c0}: continues (from sample" in capsys.readouterr().out
    assert main(["preview", "--config", str(new), "--samples", "2", "--chars", "10"]) == 0
    assert capsys.readouterr().out.count("(continued)") == 2

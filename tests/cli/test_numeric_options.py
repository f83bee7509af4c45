"""Every numeric option of every subcommand (issue 18, class 8): 0, negative, NaN,
infinite and huge values are either meaningful (and work) or one error line naming the
flag, the value and the valid range, before any work is done.  Run through the real
command line, in-process."""

from __future__ import annotations

import json

import pytest
from tests.support.dataset_files import write_corpus

from tokenloom.cli.main import main

PRE = ["preprocess", "--input", "in.jsonl", "--output-prefix", "out/p", "--tokenizer", "bytes"]
INSPECT = ["inspect", "corpus"]
PREVIEW = ["preview", "--config", "train.json"]
DEMO = ["demo", "--output-dir", "demo"]
CACHE = [
    "prepare-cache", "--dry-run", "--data-path", "corpus", "--split", "1",
    "--data-cache-path", "cache", "--vocab-size", "32000", "--eod", "2",
    "--train-iters", "4", "--eval-interval", "2", "--eval-iters", "1",
    "--global-batch-size", "2",
]  # fmt: skip
HUGE = str(10**30)

# (command line, what the one error line must say); exit status 1
REFUSED = [
    (PRE + ["--workers", "0"], "--workers 0: must be an integer >= 1 and <= 1024"),
    (PRE + ["--workers", "-3"], "--workers -3: must be an integer >= 1"),
    (PRE + ["--workers", HUGE], f"--workers {HUGE}: must be an integer >= 1 and <= 1024"),
    (PRE + ["--chunk-mb", "0"], "--chunk-mb 0.0: must be a finite number > 0 and <= 4096"),
    (PRE + ["--chunk-mb", "-1"], "--chunk-mb -1.0: must be a finite number > 0"),
    (PRE + ["--chunk-mb", "nan"], "--chunk-mb nan: must be a finite number"),
    (PRE + ["--chunk-mb", "inf"], "--chunk-mb inf: must be a finite number"),
    (PRE + ["--chunk-mb", "1e9"], "--chunk-mb 1000000000.0: must be a finite number > 0"),
    (PRE + ["--partitions", "0"], "--partitions 0: must be an integer >= 1 and <= 1024"),
    (PRE + ["--partitions", HUGE], "--partitions"),
    (PRE + ["--log-interval", "0"], "--log-interval 0: must be an integer >= 1"),
    (PRE + ["--log-interval", "-5"], "--log-interval -5: must be an integer >= 1"),
    (PRE + ["--vocab-size", "0"], "--vocab-size 0: must be an integer >= 1"),
    (PRE + ["--tiktoken-num-special-tokens", "-1"], "--tiktoken-num-special-tokens -1"),
    (INSPECT + ["--vocab-size", "0"], "--vocab-size 0: must be an integer >= 1"),
    (INSPECT + ["--show", "-1"], "--show -1: must be an integer >= 0"),
    (INSPECT + ["--show", "2", "--show-tokens", "0"], "--show-tokens 0: must be an integer >= 1"),
    (INSPECT + ["--show-chars", "-1"], "--show-chars -1: must be an integer >= 0"),
    (INSPECT + ["--plot-max-tokens", "0"], "--plot-max-tokens 0: must be an integer >= 1"),
    (PREVIEW + ["--samples", "-1"], "--samples -1: must be an integer >= 0"),
    (PREVIEW + ["--seed", "-1"], "--seed -1: must be an integer >= 0"),
    (PREVIEW + ["--chars", "-2"], "--chars -2: must be an integer >= 0"),
    (PREVIEW + ["--warn-repeats", "0"], "--warn-repeats 0.0: must be a number > 0"),
    (PREVIEW + ["--warn-repeats", "nan"], "--warn-repeats nan: must be a number > 0"),
    (PREVIEW + ["--warn-repeats=-inf"], "--warn-repeats -inf"),
    (DEMO + ["--max-files", "0"], "--max-files 0: must be an integer >= 1"),
    (DEMO + ["--vocab-size", "100"], "--vocab-size 100: must be an integer >= 258 and <= 1e+06"),
    (DEMO + ["--vocab-size", HUGE], "--vocab-size"),
    (DEMO + ["--train-mb", "0"], "--train-mb 0.0: must be a number > 0"),
    (DEMO + ["--train-mb", "nan"], "--train-mb nan"),
    (DEMO + ["--sequence-length", "0"], "--sequence-length 0: must be an integer >= 1"),
    (DEMO + ["--sequence-length", HUGE], "--sequence-length"),
    (DEMO + ["--workers", "0"], "--workers 0: must be an integer >= 1 and <= 1024"),
    (CACHE + ["--seq-length", "0"], "sequence_length (--seq-length) 0: must be an integer >= 1"),
    (CACHE + ["--seq-length", str(2**31)], "<= 2.14748e+09"),
    (CACHE + ["--seq-length", "8", "--seed", "-1"], "random_seed (--seed) -1"),
    (CACHE + ["--seq-length", "8", "--seed", str(2**32)], "<= 4.29497e+09"),
    (CACHE + ["--seq-length", "8", "--eod", "-1"], "eod (--eod) -1: must be an integer >= 0"),
    (CACHE + ["--seq-length", "8", "--pad", "-2"], "pad (--pad) -2: must be an integer >= -1"),
    (CACHE + ["--seq-length", "8", "--vocab-size", "0"], "vocab_size (--vocab-size) 0"),
    (CACHE + ["--seq-length", "8", "--num-dataset-builder-threads", "0"], "threads 0"),
    (CACHE + ["--seq-length", "8", "--mid-level-dataset-surplus", "nan"], "surplus nan"),
    (CACHE + ["--seq-length", "8", "--mid-level-dataset-surplus", "-0.1"], "surplus -0.1"),
    (CACHE + ["--seq-length", "8", "--mid-level-dataset-surplus", "1e300"], "<= 1e+06"),
    (CACHE + ["--seq-length", "8", "--world-size", "0"], "world_size=0: must be an integer >= 1"),
    (CACHE + ["--seq-length", "8", "--tensor-model-parallel-size", "-1"], "tensor_model"),
    (CACHE + ["--seq-length", "8", "--global-batch-size", "0"], "global_batch_size=0"),
    (CACHE + ["--seq-length", "8", "--eval-interval", "0"], "eval_interval=0"),
    (CACHE + ["--seq-length", "8", "--eval-iters", "-1"], "eval_iters=-1"),
    (CACHE + ["--seq-length", "8", "--train-iters", "-4"], "train_iters=-4"),
]


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "in.jsonl").write_text('{"text": "hello numbers"}\n' * 3)
    write_corpus(tmp_path / "corpus", [30] * 12, vocab=1000)
    config = {
        "data_path": ["corpus"],
        "split": "1",
        "seq_length": 8,
        "data_cache_path": "cache",
        "vocab_size": 1000,
        "eod": 2,
        "train_iters": 4,
        "eval_interval": 10,
        "eval_iters": 0,
        "global_batch_size": 2,
    }
    (tmp_path / "train.json").write_text(json.dumps(config))
    return tmp_path


@pytest.mark.parametrize("argv, message", REFUSED, ids=[" ".join(a[-2:]) for a, _ in REFUSED])
def test_bad_number_is_one_line_naming_flag_value_and_range(workdir, capsys, argv, message):
    assert main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"tokenloom {argv[0]}: error: "), err
    assert message in err[0]
    assert not (workdir / "out").exists() and not (workdir / "cache").exists()
    assert not (workdir / "demo").exists()


@pytest.mark.parametrize(
    "argv",
    [PRE + ["--workers", "nan"], INSPECT + ["--show", "inf"], PREVIEW + ["--samples", "1.5"]],
)
def test_integer_options_refuse_nan_inf_and_fractions_as_usage_errors(workdir, capsys, argv):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert "invalid int value" in capsys.readouterr().err


# values with a meaning, documented in --help: they run
MEANINGFUL = [
    PRE + ["--chunk-mb", "4096", "--partitions", "1024", "--log-interval", HUGE],
    INSPECT + ["--vocab-size", HUGE, "--show", "0", "--show-chars", "0"],
    INSPECT + ["--show", HUGE, "--show-tokens", HUGE],
    PREVIEW + ["--samples", HUGE, "--seed", HUGE, "--chars", "0", "--warn-repeats", "inf"],
    PREVIEW + ["--samples", "0"],
    CACHE + ["--seq-length", str(2**31 - 1), "--seed", str(2**32 - 1)],
    CACHE + ["--seq-length", "8", "--num-dataset-builder-threads", HUGE, "--world-size", HUGE],
    CACHE + ["--seq-length", "8", "--mid-level-dataset-surplus", "0", "--eval-iters", "0"],
    CACHE + ["--seq-length", "8", "--train-iters", "0", "--pad", "-1", "--vocab-size", HUGE],
]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("argv", MEANINGFUL, ids=[" ".join(a[:1] + a[-2:]) for a in MEANINGFUL])
def test_meaningful_extremes_run(workdir, capsys, argv):
    assert main(argv) == 0, capsys.readouterr().err


def test_help_states_the_ranges(capsys):
    expected = {
        "preprocess": ["1..1024", "(0, 4096]", "(1..1024)"],
        "inspect": ["N >= 0", "K >= 1", "0: all", "T >= 1"],
        "preview": ["R > 0", "inf: never", "an integer >= 0"],
        "demo": ["258..1000000", "inf: all of it", "1..1024"],
        "prepare-cache": ["0..1e6", "2**31-1", "2**32-1", "an integer >= -1"],
    }
    for command, needles in expected.items():
        with pytest.raises(SystemExit):
            main([command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        for needle in needles:
            assert needle in text, (command, needle)

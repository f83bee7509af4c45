"""Crafted JSON files through the real command line (issue 18, classes 5 and 6).

Each command runs in a subprocess with its memory bounded and a timeout: a sidecar,
``--config``, per-split file or publish journal that nests 100,000 levels deep, is a
symlink to ``/dev/zero`` or is a sparse 1 TiB file gives one error line naming the file
(``inspect`` only warns about a broken sidecar), never a traceback, a ``MemoryError``
or a hang.
"""

from __future__ import annotations

import json

import pytest
from tests.support.dataset_files import write_corpus
from tests.support.untrusted_files import one_line_error, plant, run_cli

KINDS = ["deep", "deep_closed", "zero", "huge"]
LIMITS = {
    "deep": "levels deep",
    "deep_closed": "levels deep",
    "zero": "not a regular file",
    "huge": "larger than the limit",
}

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]


@pytest.fixture
def corpora(tmp_path):
    """Two small pairs without sidecars, ``a`` and ``b``."""
    write_corpus(tmp_path / "a", [20] * 10)
    write_corpus(tmp_path / "b", [20] * 10, seed=1)
    return tmp_path


def _config(tmp_path, **extra) -> str:
    config = {
        "data_path": [str(tmp_path / "a")],
        "split": "100,0,0",
        "seq_length": 16,
        "seed": 1234,
        "data_cache_path": str(tmp_path / "cache"),
        "train_iters": 2,
        "eval_interval": 1000,
        "eval_iters": 0,
        "global_batch_size": 2,
        "vocab_size": 32000,
        "eod": 2,
        **extra,
    }
    path = tmp_path / "train.json"
    path.write_text(json.dumps(config))
    return str(path)


@pytest.mark.parametrize("kind", KINDS)
def test_inspect_warns_about_a_crafted_sidecar(corpora, kind):
    plant(corpora / "a.json", kind)
    done = run_cli(["inspect", "a"], corpora)
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.returncode == 0, done.stderr[-3000:]
    warning = next(line for line in done.stdout.splitlines() if "warning: a.json:" in line)
    assert "provenance sidecar" in warning and LIMITS[kind] in warning


@pytest.mark.parametrize("kind", KINDS)
def test_merge_refuses_a_crafted_sidecar_in_one_line(corpora, kind):
    plant(corpora / "b.json", kind)
    done = run_cli(["merge", "--output-prefix", "m", "a", "b"], corpora)
    line = one_line_error(done, "merge")
    assert "error: b.json: provenance sidecar" in line and LIMITS[kind] in line
    assert not (corpora / "m.bin").exists()


@pytest.mark.parametrize("kind", ["deep", "zero"])
def test_preview_refuses_a_crafted_sidecar_in_one_line(corpora, kind):
    sidecar = plant(corpora / "a.json", kind)
    done = run_cli(["preview", "--config", _config(corpora), "--samples", "0"], corpora)
    line = one_line_error(done, "preview")
    assert str(sidecar) in line and LIMITS[kind] in line


@pytest.mark.parametrize("command", ["prepare-cache", "preview"])
@pytest.mark.parametrize("kind", KINDS)
def test_a_crafted_config_is_one_error_line(corpora, command, kind):
    config = plant(corpora / "train.json", kind)
    done = run_cli([command, "--config", config], corpora)
    line = one_line_error(done, command)
    # /dev/zero is allowed as a stream (a pipe is a fine --config), and read bounded
    limit = "larger than the limit" if kind == "zero" else LIMITS[kind]
    assert f"--config {config}" in line and limit in line


@pytest.mark.parametrize("nesting", ["flow", "anchors"])
def test_a_crafted_yaml_config_is_one_error_line(corpora, nesting):
    pytest.importorskip("yaml")
    config = corpora / "train.yaml"
    if nesting == "flow":
        config.write_text("data_path: " + "[" * 100_000)
    else:  # a billion laughs: a few hundred bytes that expand to 10**9 values
        levels = ["&a0 [x, x, x, x, x, x, x, x, x, x]"]
        levels += [f"&a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
        config.write_text(f"data_path: [{', '.join(levels)}]\n")
    done = run_cli(["prepare-cache", "--config", config, "--dry-run"], corpora, timeout=200)
    line = one_line_error(done, "prepare-cache")
    assert f"--config {config}" in line and "YAML" in line


@pytest.mark.parametrize("kind", ["deep", "zero", "huge"])
def test_a_crafted_per_split_file_is_one_error_line(corpora, kind):
    per_split = plant(corpora / "split.json", kind)
    argv = ["prepare-cache", "--per-split-data-args-path", per_split, "--seq-length", "16"]
    line = one_line_error(run_cli(argv, corpora), "prepare-cache")
    limit = "larger than the limit" if kind == "zero" else LIMITS[kind]  # a stream, bounded
    assert str(per_split) in line and limit in line


@pytest.mark.parametrize("kind", ["deep", "zero"])
def test_a_crafted_publish_journal_is_one_error_line(corpora, kind):
    journal = plant(corpora / ".a.publish-journal", kind)
    line = one_line_error(run_cli(["inspect", "a"], corpora), "inspect")
    assert str(journal) in line and "publish journal" in line and LIMITS[kind] in line

"""`tokenloom trace --split valid|test`: the trace of every step of a valid or test split
equals what real loaders over that split served (DataLoader workers, 2 DP ranks),
including the full-validation loader (one single pass from sample 0, whatever the
config's dataloader_type)."""

from __future__ import annotations

import argparse
import json

import pytest
from tests.cli._trace_support import rank_loader, write_config
from tests.cli.test_trace import _check_steps, _served
from tests.training._data import write_corpus

from tokenloom.cli.main import main
from tokenloom.cli.trace import load_run
from tokenloom.errors import ConfigError


def _config(tmp_path, weights=("0.7", "0.3"), **extra) -> str:
    big = write_corpus(tmp_path / "big", 300, seed=1)
    small = write_corpus(tmp_path / "small", 90, seed=2)
    settings = {"split": "60,25,15", "eval_interval": 6, "eval_iters": 2, **extra}
    data_path = [big, small] if weights is None else [weights[0], big, weights[1], small]
    return write_config(tmp_path, "train.json", data_path, **settings)


def _load(config: str, split: str, state=None):
    return load_run(
        argparse.Namespace(
            config=config,
            state=state,
            split=split,
            dataloader_type=None,
            allow_mixture_change=False,
            allow_data_change=False,
        )
    )


def _check(dataset, layout, full_validation=False, extra_steps=0):
    steps = len(dataset) // layout.global_batch_size + extra_steps
    loaders = [
        rank_loader(dataset, layout, rank, 2, full_validation=full_validation) for rank in range(2)
    ]
    _check_steps(dataset, layout, _served(loaders, layout, steps))
    return loaders


@pytest.mark.processes
@pytest.mark.timeout(300)
@pytest.mark.parametrize("split", ["valid", "test"])
@pytest.mark.parametrize("kind", ["single", "cyclic", "elastic"])
def test_every_step_of_a_split_equals_what_its_loaders_served(tmp_path, split, kind):
    config = _config(tmp_path, dataloader_type=kind)
    dataset, layout, _, _ = _load(config, split)
    train, _, _, _ = _load(config, "train")
    assert str(dataset.split.name) == split and len(dataset) != len(train)
    assert layout.dataloader_type == kind and len(dataset) >= 16
    _check(dataset, layout, extra_steps=0 if kind == "single" else 3)  # cyclic: next pass


@pytest.mark.processes
@pytest.mark.timeout(300)
def test_the_full_validation_loader_is_traced(tmp_path, capsys):
    config = _config(tmp_path, None, dataloader_type="cyclic", full_validation=True)
    dataset, layout, _, _ = _load(config, "valid")
    assert layout.dataloader_type == "single"  # the loader's rule: one pass from 0
    loaders = _check(dataset, layout, full_validation=True)
    assert all(loader.batch_sampler.consumed_samples == 0 for loader in loaders)
    steps = len(dataset) // layout.global_batch_size
    argv = ["trace", "--config", config, "--split", "valid", "--step", str(steps - 1), "--json"]
    assert main(argv) == 0
    assert len(json.loads(capsys.readouterr().out)["samples"]) == layout.global_batch_size
    argv[-2] = str(steps)  # past the single pass
    assert main(argv[:-1]) != 0
    assert "ends before it" in capsys.readouterr().err
    train, train_layout, _, _ = _load(config, "train")
    assert train_layout.dataloader_type == "cyclic"  # full_validation is the valid split's


def test_a_state_is_the_train_loaders(tmp_path):
    config = _config(tmp_path)
    state = tmp_path / "state.json"
    state.write_text("{}")
    with pytest.raises(ConfigError, match="--split valid --state"):
        _load(config, "valid", str(state))

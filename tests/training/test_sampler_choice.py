"""``build_batch_sampler`` is the loader's own sampler without the loader (so without
torch): for every sampler kind it yields what ``build_pretraining_data_loader(...)
.batch_sampler`` yields, refuses what the loader refuses, and a shared permutation memo
changes nothing but the number of draws."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tokenloom.errors import ConfigError
from tokenloom.training import PermutationMemo, build_batch_sampler, build_pretraining_data_loader

ROOT = Path(__file__).resolve().parents[2]
CASES = [
    dict(dataloader_type="single"),
    dict(dataloader_type="single", drop_last=False),
    dict(dataloader_type="single", hybrid_context_parallel=True),
    dict(dataloader_type="cyclic"),
    dict(dataloader_type="cyclic", data_sharding=False),
    dict(dataloader_type="elastic", seed=5),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c.values())))
@pytest.mark.parametrize("consumed", [0, 24])
def test_it_yields_what_the_loaders_sampler_yields(case, consumed):
    dataset = list(range(203))
    for rank in range(3):
        arguments = dict(
            micro_batch_size=2,
            global_batch_size=12,
            data_parallel_rank=rank,
            data_parallel_size=3,
            **case,
        )
        loader = build_pretraining_data_loader(dataset, consumed, pin_memory=False, **arguments)
        mine = build_batch_sampler(dataset, consumed, **arguments)
        assert type(mine) is type(loader.batch_sampler)
        assert list(mine) == list(loader.batch_sampler)


def test_a_shared_memo_draws_once_per_pass_and_changes_nothing():
    dataset = list(range(200))
    memo = PermutationMemo()
    arguments = dict(dataloader_type="elastic", micro_batch_size=2, global_batch_size=8)
    shared = [
        build_batch_sampler(
            dataset, 0, data_parallel_rank=r, data_parallel_size=4, permutations=memo, **arguments
        )
        for r in range(4)
    ]
    alone = [
        build_batch_sampler(dataset, 0, data_parallel_rank=r, data_parallel_size=4, **arguments)
        for r in range(4)
    ]
    assert [list(s) for s in shared] == [list(s) for s in alone]
    assert all(s.permutations is memo for s in shared) and memo.value is not None
    assert not memo.value.flags.writeable


def test_bad_arguments_are_refused_as_the_loader_refuses_them():
    for bad in (dict(micro_batch_size=0), dict(micro_batch_size=2, data_parallel_rank=3)):
        arguments = dict(dataloader_type="cyclic", data_parallel_size=2, **bad)
        with pytest.raises(ConfigError) as mine:
            build_batch_sampler(list(range(50)), 0, **arguments)
        with pytest.raises(ConfigError) as theirs:
            build_pretraining_data_loader(list(range(50)), 0, **arguments)
        assert str(mine.value) == str(theirs.value)
    with pytest.raises(ConfigError, match="external"):
        build_batch_sampler(list(range(50)), 0, dataloader_type="external", micro_batch_size=1)


@pytest.mark.processes
def test_it_does_not_import_torch():
    code = (
        "import sys; from tokenloom.training import build_batch_sampler; "
        "s = build_batch_sampler(list(range(64)), 0, dataloader_type='elastic', "
        "micro_batch_size=2, global_batch_size=8, data_parallel_size=2); list(s); "
        "print('torch' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "False"

"""Differential tests: tokenloom's BalancedCP scheduler and hybrid-CP wrapper vs megatron-core.

megatron-core 0.16.1 runs in subprocesses (with the golden README's CPU shims) from
``$TOKENLOOM_MEGATRON_PATH`` or the repository's ``.megatron-core``.  Random inputs:
every length distribution of the golden file, random input order, ties, and
non-contiguous, string or negative ids.  ``TOKENLOOM_DIFF_CASES`` (default 160) and
``TOKENLOOM_DIFF_SEED`` scale and vary the scheduler run.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from tests.packing import _megatron_shims
from tests.support import distributed_harness as harness

from tokenloom.errors import TokenloomError
from tokenloom.packing import BalancedCPScheduler

pytestmark = [
    pytest.mark.megatron,
    pytest.mark.slow,
    pytest.mark.skipif(
        not _megatron_shims.megatron_path(),
        reason="megatron-core 0.16.1 not found: set TOKENLOOM_MEGATRON_PATH to an unpacked copy",
    ),
]
HERE = Path(__file__).parent
NUM_CASES = int(os.environ.get("TOKENLOOM_DIFF_CASES", "160"))
SEED = int(os.environ.get("TOKENLOOM_DIFF_SEED", "0"))


def _lengths(rng: random.Random, kind: str, n: int, limit: int, ranks: int) -> list[int]:
    cap = limit * ranks
    if kind == "lognormal":
        return [max(1, min(cap, int(rng.lognormvariate(0, 0.8) * limit / 2))) for _ in range(n)]
    if kind == "longtail":
        return [max(1, min(cap, int(limit / 8 * rng.paretovariate(1.2)))) for _ in range(n)]
    if kind == "uniform":
        return [rng.randint(1, cap) for _ in range(n)]
    if kind == "small":
        return [rng.randint(1, limit) for _ in range(n)]
    if kind == "pow2":
        return [
            max(1, min(cap, limit * rng.choice([1, 2, 4]) + rng.choice([-1, 0, 1])))
            for _ in range(n)
        ]
    distinct = [rng.randint(1, cap) for _ in range(rng.randint(1, 3))]
    return [rng.choice(distinct) for _ in range(n)]


def random_cases(count: int, seed: int) -> list[dict]:
    """Random scheduler inputs that megatron-core accepts (power-of-two sizes, fitting lengths)."""
    rng = random.Random(seed)
    kinds = ("lognormal", "longtail", "uniform", "small", "pow2", "ties")
    cases = []
    for index in range(count):
        limit, ranks = rng.choice([4, 16, 100, 1024]), rng.choice([1, 2, 4, 8, 16])
        n = rng.randint(1, 120)
        lengths = _lengths(rng, kinds[index % len(kinds)], n, limit, ranks)
        style = index % 4
        ids: list = list(range(n))
        if style == 1:
            ids = rng.sample(range(-500, 10_000), n)
        elif style == 2:
            ids = [f"doc-{rng.randint(0, 10**6)}-{i}" for i in range(n)]
        pairs = list(zip(ids, lengths))
        if style == 3:
            rng.shuffle(pairs)
        cases.append(
            {
                "max_seq_len_per_rank": limit,
                "dp_cp_size": ranks,
                "sample_id_seqlens": [list(p) for p in pairs],
            }
        )
    return cases


def _run(cmd: list[str], timeout: float) -> None:
    proc = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
    )
    if proc.returncode:
        pytest.fail(f"megatron-core runner failed:\n{proc.stderr[-4000:]}")


@pytest.mark.timeout(600)
def test_balanced_cp_scheduler_matches_megatron_on_random_inputs(tmp_path: Path) -> None:
    cases = random_cases(NUM_CASES, SEED)
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(cases))
    _run(
        [
            sys.executable,
            str(HERE / "_megatron_bcp_runner.py"),
            str(spec),
            str(tmp_path / "out.json"),
        ],
        timeout=540,
    )
    theirs = json.loads((tmp_path / "out.json").read_text())
    compared = 0
    for index, (case, want) in enumerate(zip(cases, theirs)):
        items = [tuple(x) for x in case["sample_id_seqlens"]]
        scheduler = BalancedCPScheduler(case["max_seq_len_per_rank"], case["dp_cp_size"])
        if "error" in want:
            with pytest.raises(TokenloomError):
                scheduler.get_groups_and_subsamples(items)
            continue
        seqlens, ids = scheduler.get_groups_and_subsamples(items)
        assert seqlens == want["seqlen_groups"], f"case {index}: {case}"
        assert [[list(r) for r in m] for m in ids] == want["sample_id_groups"], f"case {index}"
        compared += 1
    assert compared >= NUM_CASES * 3 // 4


@pytest.mark.timeout(600)
def test_one_round_with_megatrons_estimator_and_strategy_arguments(tmp_path: Path) -> None:
    """``next_hdp_group(sample_seqlens, compute_estimator, total_gpus, strategy=...)``:
    megatron-core's signature, a caller's cost model, and both scan orders."""
    cases = [
        dict(case, strategy=strategy, estimator=estimator)
        for i, case in enumerate(random_cases(24, SEED + 1))
        for strategy, estimator in [("dp", "linear"), ("pp", "default"), ("pp", "linear")][i % 3 :][
            :1
        ]
    ]
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(cases))
    _run(
        [
            sys.executable,
            str(HERE / "_megatron_bcp_runner.py"),
            str(spec),
            str(tmp_path / "out.json"),
        ],
        timeout=540,
    )
    theirs = json.loads((tmp_path / "out.json").read_text())
    compared = 0
    for index, (case, want) in enumerate(zip(cases, theirs)):
        scheduler = BalancedCPScheduler(case["max_seq_len_per_rank"], case["dp_cp_size"])
        ordered = sorted(
            (tuple(x) for x in case["sample_id_seqlens"]), key=lambda item: item[1], reverse=True
        )
        estimator = linear if case["estimator"] == "linear" else scheduler.get_total_workload
        if "error" in want:
            continue  # input megatron-core rejects: the full-schedule test covers those
        seqlens, leftovers, times, ids = scheduler.next_hdp_group(
            ordered, estimator, case["dp_cp_size"], strategy=case["strategy"]
        )
        got = json.loads(json.dumps([seqlens, [list(x) for x in leftovers], times, ids]))
        assert got == want["round"], f"case {index}: {case}"
        compared += 1
    assert compared >= len(cases) // 2


def linear(seq_len, cp_size=None):
    return float(seq_len) / (cp_size or 1)


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_hybrid_cp_wrapper_matches_megatron_on_random_batches(tmp_path: Path) -> None:
    results = harness.launch(
        str(HERE / "_megatron_hybrid_worker.py"), "all", tmp_path, 4, timeout=240
    )
    checked = 0
    for rank, result in enumerate(results):
        for layout, sides in result.items():
            if not sides:
                continue
            for step, (mine, theirs) in enumerate(zip(sides["tokenloom"], sides["megatron"])):
                assert mine == theirs, f"rank {rank} {layout} step {step}"
                checked += 1
    assert checked == 4 * 3 * 3

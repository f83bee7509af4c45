"""numba's on-disk cache: a read-only install still caches (in the user-wide folder),
and after ``tokenloom warmup`` a first process compiles nothing."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import tokenloom

pytest.importorskip("numba")

ROOT = Path(__file__).resolve().parents[2]

STATS = textwrap.dedent("""
    import json, numba
    from tokenloom.kernels import KERNEL_MODULES, KERNELS
    KERNELS.join()
    stats = {}
    for name in KERNEL_MODULES:
        module = KERNELS.get(name)
        for attr, value in vars(module).items():
            if isinstance(value, numba.core.registry.CPUDispatcher) and value.signatures:
                stats[f"{name}.{attr}"] = [sum(value.stats.cache_hits.values()),
                                         sum(value.stats.cache_misses.values())]
    print(json.dumps(stats))
""")


def _run(code: str, env: dict, timeout: int) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        cwd=str(ROOT),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _hits_and_misses(output: str) -> dict:
    import json

    return json.loads(output.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_read_only_install_caches_in_the_user_wide_folder(tmp_path):
    site = tmp_path / "site"
    shutil.copytree(
        Path(tokenloom.__file__).parent,
        site / "tokenloom",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    kernels = site / "tokenloom" / "kernels"
    if os.geteuid() == 0:  # root writes anywhere: make the in-tree cache path unusable
        (kernels / "__pycache__").write_text("not a folder")
    else:
        kernels.chmod(0o555)
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR",)}
    env.update(
        PYTHONPATH=str(site), XDG_CACHE_HOME=str(tmp_path / "xdg"), TOKENLOOM_DISABLE_NUMBA="0"
    )
    shuffle = textwrap.dedent("""
        import numpy
        from tokenloom.index import dispatch, legacy_shuffle
        x = numpy.arange(2 * dispatch.SHUFFLE_KERNEL_MIN_SIZE, dtype="i4")
        assert dispatch.shuffle_route(numpy.random.RandomState(1), x) == dispatch.KERNEL
        legacy_shuffle(numpy.random.RandomState(1), x)
    """)
    first = _hits_and_misses(_run(shuffle + STATS, env, 500))
    assert first["shuffle.shuffle"] == [0, 1]  # compiled
    cached = list((tmp_path / "xdg" / "numba").rglob("shuffle.shuffle-*.nbi"))
    assert cached, "nothing cached in $XDG_CACHE_HOME/numba"
    second = _hits_and_misses(_run(shuffle + STATS, env, 500))
    assert second["shuffle.shuffle"] == [1, 0]  # loaded from the user-wide cache
    kernels.chmod(0o755)


WORKLOAD = textwrap.dedent("""
    import sys, tempfile, numpy
    sys.path.insert(0, {root!r})
    from tests.support.dataset_files import small_config, split_indices, write_corpus
    from tokenloom.datasets import GPTDataset, Split
    import tokenloom.index as index
    folder = tempfile.mkdtemp()
    corpus = write_corpus(folder + "/c", numpy.arange(5, 60), seed=1, vocab=90)
    for _ in range(2):  # built, then reopened from the cache
        config = small_config(corpus, folder + "/cache", create_attention_mask=False)
        low = GPTDataset.build_low_level_dataset(corpus, config)
        ds = GPTDataset(low, corpus, split_indices(config, Split.train, len(low)), None,
                        Split.train, config)
        ds[0]; ds.get_batch([0, None])
        from tokenloom.kernels import KERNELS
        KERNELS.join()
        ds[1]
    rng = numpy.random.default_rng(0)
    for n in (8, 100):
        w = rng.random(n) + 0.1
        index.build_blending_indices(w / w.sum(), 400_000)
        index.build_exhaustive_blending_indices(rng.integers(1000, 5000, n))
    from tokenloom.index import dispatch  # indices long enough for the kernel routes
    n = max(dispatch.SAMPLE_VECTORIZED_MAX_DOCUMENTS + 1, dispatch.SHUFFLE_KERNEL_MIN_SIZE)
    sizes = rng.integers(1, 50, n).astype(numpy.int32)
    documents = index.build_document_index(numpy.arange(n, dtype=numpy.int32), 1,
                                           numpy.random.RandomState(1), False)
    assert dispatch.sample_index_route(documents) == dispatch.KERNEL
    sample = index.build_sample_index(sizes, documents, 16, 1, int(sizes.sum()), True, 1)
    assert sample.shape[0] - 1 >= dispatch.SHUFFLE_KERNEL_MIN_SIZE
    index.build_shuffle_index(sample.shape[0] - 1, sample.shape[0] - 1,
                              numpy.random.RandomState(1))
    from tokenloom.training.permutation import randperm
    randperm(1000, 3)  # the random samplers' permutation
""")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_after_warmup_a_first_process_compiles_nothing(tmp_path):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba"), TOKENLOOM_DISABLE_NUMBA="0")
    done = subprocess.run(
        [sys.executable, "-m", "tokenloom", "warmup", "--token-dtypes", "uint16"],
        capture_output=True,
        text=True,
        env=env,
        timeout=800,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "samples" in done.stdout and str(tmp_path / "numba") in done.stdout
    stats = _hits_and_misses(_run(WORKLOAD.format(root=str(ROOT)) + STATS, env, 300))
    assert stats, "the workload ran no kernel"
    missed = {name: hm for name, hm in stats.items() if hm[1]}
    assert not missed, f"compiled although warmed up: {missed}"
    assert {
        "batch.fill_sample",
        "batch.fill_batch",
        "blend_fast.greedy",
        "sample_index.sample_index",
        "shuffle.shuffle",
        "permutation.swap_block",
    } <= set(stats)

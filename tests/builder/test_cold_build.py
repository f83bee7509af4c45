"""The distributed cold build (build_on_all_ranks) on real gloo process groups.

Also the worker script: ``python test_cold_build.py <scenario> <out_dir>``. Every rank
logs its ``IndexCache.store`` calls (rank, class, stem) to ``<out_dir>/stores.log``.

* ``spread``: three ranks share one cache folder: each builds a share of the blend's
  prefixes; the cache is byte-identical to a single-process build's;
* ``kill``: rank 2 kills itself (SIGKILL) at its first store: ranks 0 and 1 fail with a
  DistributedError naming rank 2 within the timeout; the cache holds only whole
  entries, and a rerun builds only what is missing;
* ``partial``: rank 2's cache folder is another one (a node that does not see the
  shared folder): the build falls back to the rank-0 path.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
from pathlib import Path

import numpy
import pytest
from tests.support import distributed_harness as harness
from tests.support.dataset_files import FLAGS, write_corpus

from tokenloom.builder.cold_build import estimate_cost
from tokenloom.cache import IndexCache
from tokenloom.cache import pack as pack_module

WORLD = 3
PREFIXES = 7
SIZES = [3000, 300, 300]


def corpus(data: Path) -> list[str]:
    """Seven prefixes of different sizes (so the shares differ)."""
    data.mkdir(parents=True, exist_ok=True)
    rng = numpy.random.default_rng(7)
    prefixes = []
    for i in range(PREFIXES):
        prefix = data / f"part{i}"
        if not prefix.with_suffix(".idx").exists():
            write_corpus(prefix, rng.integers(5, 120, 40 + 90 * i), seed=i)
        prefixes.append(str(prefix))
    return prefixes


def config(out: Path, cache: Path, **overrides):
    from tokenloom.datasets import GPTDatasetConfig

    fields = dict(
        random_seed=11,
        sequence_length=32,
        blend=(corpus(out / "data"), [1.0 + (i % 3) for i in range(PREFIXES)]),
        split="90,5,5",
        tokenizer={"vocab_size": 32000, "eod": 2},
        path_to_cache=str(cache),
        num_dataset_builder_threads=2,
        **FLAGS,
    )
    fields.update(overrides)
    return GPTDatasetConfig(**fields)


def build(out: Path, cache: Path, **overrides) -> dict:
    """Build the blend; a digest of every split's samples."""
    from tokenloom.builder import BlendedMegatronDatasetBuilder
    from tokenloom.datasets import GPTDataset

    datasets = BlendedMegatronDatasetBuilder(
        GPTDataset, SIZES, lambda: True, config(out, cache, **overrides)
    ).build()
    digest = {}
    for split, dataset in zip(("train", "valid", "test"), datasets):
        md5 = hashlib.md5()
        for i in range(0, len(dataset), 7):
            md5.update(numpy.asarray(dataset[i]["tokens"]).tobytes())
        digest[split] = [len(dataset), md5.hexdigest()]
    return digest


# --------------------------------------------------------------------------- worker side
def _log_stores(log: Path, rank: int, die: bool = False) -> None:
    original = IndexCache.store

    def store(self, key, arrays, checks=None):
        if die:
            os.kill(os.getpid(), signal.SIGKILL)  # kill -9, mid-build
        with open(log, "a") as handle:
            handle.write(f"{rank} {key.class_name} {key.stem}\n")
        return original(self, key, arrays, checks)

    IndexCache.store = store


def worker(scenario: str, out_dir: str) -> None:
    rank, _ = harness.init_worker()
    out = Path(out_dir)
    _log_stores(out / "stores.log", rank, die=scenario == "kill" and rank == 2)
    cache = out / ("elsewhere" if scenario == "partial" and rank == 2 else "cache")
    result = harness.outcome(lambda: build(out, cache))
    harness.write_result(out_dir, rank, result)  # before the group goes (a rank may be gone)
    import torch.distributed as dist

    if result["ok"]:
        dist.destroy_process_group()


# --------------------------------------------------------------------------- helpers
def stores(out: Path) -> list[tuple[str, str, str]]:
    path = out / "stores.log"
    lines = path.read_text().splitlines() if path.exists() else []
    return [tuple(line.split()) for line in lines if line]


def cache_contents(directory: Path) -> dict[str, bytes]:
    """Every entry's bytes (entry files and pack entries) by stem, and every other file
    (but the pack files, named at random) by its relative path; a start-up memo by its
    recorded lengths (the files it records depend on their age, see ``memo.recordable``)."""
    contents = {}
    for stem in IndexCache(str(directory)).stems():
        path = directory / f"{stem}-indices.cache"
        if path.exists():
            contents[stem] = path.read_bytes()
        else:
            contents[stem] = pack_module.read_entry(pack_module.locate(str(directory), stem))
    for path in directory.rglob("*"):
        relative = str(path.relative_to(directory))
        if path.is_file() and not relative.startswith("packs") and "-indices." not in relative:
            data = path.read_bytes()
            if relative.endswith("-startup-memo.json"):
                lengths = json.loads(data.split(b"\n", 1)[1])["lengths"]
                data = json.dumps(lengths, sort_keys=True).encode()
            contents[relative] = data
    return contents


def single_build(out: Path, name: str) -> tuple[dict, dict[str, bytes]]:
    digest = build(out, out / name)
    return digest, cache_contents(out / name)


pytestmark = [pytest.mark.distributed, pytest.mark.slow]


# --------------------------------------------------------------------------- tests
def test_estimate_cost_is_within_2x_of_the_entries_built(tmp_path):
    from tokenloom.builder import BlendedMegatronDatasetBuilder
    from tokenloom.datasets import GPTDataset

    prefixes = corpus(tmp_path / "data")
    for prefix, sizes in [(prefixes[0], SIZES), (prefixes[-1], SIZES), (prefixes[3], [30000] * 3)]:
        settings = config(tmp_path, tmp_path / "cache", blend=([prefix], None))
        datasets = BlendedMegatronDatasetBuilder(GPTDataset, sizes, lambda: True, settings).build()
        entries = sum(
            len(d.document_index) + len(d.sample_index) + len(d.shuffle_index) for d in datasets
        )
        estimate = estimate_cost(prefix, settings.split_matrix, sizes, 32)
        assert entries / 2 < estimate < entries * 2, (prefix, estimate, entries)
    split = [(0.0, 1.0), None, None]
    assert estimate_cost(str(tmp_path / "missing"), split, SIZES, 32) == 1.0
    assert estimate_cost(None, split, SIZES, 32) == 1.0


@pytest.mark.timeout(420)
def test_spread_build_is_byte_identical_to_a_single_rank_build(tmp_path):
    corpus(tmp_path / "data")  # before the ranks start: they only read it
    results = harness.launch(__file__, "spread", tmp_path, WORLD, timeout=400)
    assert all(r["ok"] for r in results), results
    digest, single = single_build(tmp_path, "single")
    assert [r["value"] for r in results] == [digest] * WORLD
    spread = cache_contents(tmp_path / "cache")
    assert sorted(spread) == sorted(single)
    assert len([name for name in single if name.endswith("memo.json")]) == 1
    assert [name for name in single if spread[name] != single[name]] == []
    built = [s for s in stores(tmp_path) if s[1] == "GPTDataset"]
    assert len(built) == PREFIXES * 3 == len({stem for _, _, stem in built})  # each once
    assert {rank for rank, _, _ in built} == {"0", "1", "2"}  # by every rank


@pytest.mark.timeout(420)  # a killed rank is named after the timeout (30 s here)
def test_a_rank_killed_mid_build_fails_the_others_naming_it(tmp_path):
    corpus(tmp_path / "data")
    results = harness.launch(
        __file__,
        "kill",
        tmp_path,
        WORLD,
        timeout=400,
        may_die=[2],
        env_extra={"TOKENLOOM_DISTRIBUTED_TIMEOUT_S": "30"},
    )
    assert results[2] is None  # killed before it could write anything
    for result in results[:2]:
        assert not result["ok"] and result["type"] == "DistributedError", result
        assert "rank 2" in result["message"] and "rerun" in result["message"]
    survivors = stores(tmp_path)
    assert survivors and {rank for rank, _, _ in survivors} <= {"0", "1"}
    _, reference = single_build(tmp_path, "reference")
    partial = cache_contents(tmp_path / "cache")
    assert partial and all(partial[name] == reference[name] for name in partial)  # all whole
    before = set(partial)
    build(tmp_path, tmp_path / "cache")  # a rerun on one rank builds only what is missing
    after = cache_contents(tmp_path / "cache")
    assert all(after[name] == partial[name] for name in before if "memo" not in name)
    assert 0 < len([name for name in set(after) - before if "GPTDataset" in name]) < PREFIXES * 3
    assert cache_contents(tmp_path / "cache").keys() == reference.keys()


@pytest.mark.timeout(420)
def test_a_folder_only_some_ranks_see_falls_back_to_rank0(tmp_path):
    corpus(tmp_path / "data")
    results = harness.launch(__file__, "partial", tmp_path, WORLD, timeout=400)
    assert all(r["ok"] for r in results), results
    assert len({str(r["value"]) for r in results}) == 1
    built = stores(tmp_path)
    ranks = {rank for rank, _, _ in built}
    assert ranks == {"0", "2"}  # rank 0 for the shared folder, rank 2 for its own
    assert len([s for s in built if s[0] == "0" and s[1] == "GPTDataset"]) == PREFIXES * 3
    log = (tmp_path / "rank0.log").read_text()
    assert "ranks 2 do not see rank 0's cache folder" in log
    assert not list((tmp_path / "cache").glob(".tokenloom-shared-*"))  # token removed


if __name__ == "__main__":
    worker(sys.argv[1], sys.argv[2])

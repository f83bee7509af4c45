"""tokenloom.distributed: the build-on-rank-0-then-load dance on real gloo process groups.

This file is also the worker script: ``python test_distributed.py <scenario> <out_dir>``
runs one rank of a scenario (see ``test_distributed_harness.launch``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from tests.support import distributed_harness as harness

from tokenloom.distributed import Communicator, build_on_rank0_then_load, get_communicator
from tokenloom.errors import CacheError, DistributedError

VALUE = [7, 3, 9, 1]


# --------------------------------------------------------------------------- worker side
class FileCache:
    """A one-file cache: a build writes it atomically and logs the building rank."""

    def __init__(self, directory: Path, log: Path, rank: int, fail_on_build: Exception = None):
        self.path = directory / "cache.json"
        self.log, self.rank, self.fail = log, rank, fail_on_build

    def construct(self):
        if self.path.is_file():
            return json.loads(self.path.read_text())
        if self.fail is not None:
            raise self.fail
        from tokenloom.atomic import atomic_write_bytes

        atomic_write_bytes(self.path, json.dumps(VALUE).encode())
        with open(self.log, "a") as handle:
            handle.write(f"{self.rank}\n")
        return list(VALUE)

    def is_ready(self, manifest):
        return manifest == "cache.json" and self.path.is_file()


def _scenario(
    base: Path,
    name: str,
    rank: int,
    world: int,
    *,
    dirs,
    local,
    fail=None,
    built=lambda: True,
    synchronize=True,
):
    directory = base / name / dirs(rank)
    directory.mkdir(parents=True, exist_ok=True)
    cache = FileCache(directory, base / name / "builds.log", rank, fail)
    local_rank, local_world_size = local(rank)
    comm = get_communicator(local_rank=local_rank, local_world_size=local_world_size)
    return harness.outcome(
        lambda: build_on_rank0_then_load(
            cache.construct,
            is_built_on_rank=built,
            synchronize=synchronize,
            manifest=lambda _: "cache.json",
            is_ready=cache.is_ready,
            comm=comm,
            what=name,
        )
    )


def _two_nodes(rank):  # ranks 0,1 share node A; rank 2 is alone on node B
    return (rank, 2) if rank < 2 else (0, 1)


def worker(out_dir: str) -> None:
    rank, world = harness.init_worker()
    base = Path(out_dir)
    result = {}
    shared, one_node = (lambda r: "shared"), (lambda r: (r, world))
    own_dir, own_node = (lambda r: f"rank{r}"), (lambda r: (0, 1))
    node_dir = lambda r: "nodeA" if r < 2 else "nodeB"  # noqa: E731
    result["shared"] = _scenario(base, "shared", rank, world, dirs=shared, local=one_node)
    result["node_local"] = _scenario(base, "node_local", rank, world, dirs=own_dir, local=own_node)
    result["two_nodes"] = _scenario(base, "two_nodes", rank, world, dirs=node_dir, local=_two_nodes)
    result["wrong_topology"] = _scenario(
        base, "wrong_topology", rank, world, dirs=own_dir, local=one_node
    )
    boom = ValueError("boom from rank 0") if rank == 0 else None
    result["rank0_fails"] = _scenario(
        base, "rank0_fails", rank, world, dirs=shared, local=one_node, fail=boom
    )
    denied = PermissionError(13, "Permission denied", "/readonly/cache") if rank == 0 else None
    result["rank0_oserror"] = _scenario(
        base, "rank0_oserror", rank, world, dirs=shared, local=one_node, fail=denied
    )
    leader_boom = RuntimeError("disk full on node B") if rank == 2 else None
    result["leader_fails"] = _scenario(
        base, "leader_fails", rank, world, dirs=node_dir, local=_two_nodes, fail=leader_boom
    )
    result["not_built"] = _scenario(
        base, "not_built", rank, world, dirs=shared, local=one_node, built=lambda: rank != 1
    )
    result["unsynchronized"] = _scenario(
        base, "unsynchronized", rank, world, dirs=own_dir, local=one_node, synchronize=False
    )
    import torch.distributed as dist

    after = [None] * world
    dist.all_gather_object(after, rank)  # the group is still usable after the failures
    result["after"] = after
    dist.destroy_process_group()
    harness.write_result(out_dir, rank, result)


# --------------------------------------------------------------------------- tests
@pytest.fixture(scope="module")
def gloo_results(tmp_path_factory):
    out = tmp_path_factory.mktemp("gloo3")
    results = harness.launch(__file__, "helper", out, 3, timeout=180)
    return out, results


def _builds(out: Path, name: str):
    log = out / name / "builds.log"
    return sorted(int(x) for x in log.read_text().split()) if log.exists() else []


@pytest.mark.distributed
@pytest.mark.parametrize(
    "name, builders",
    [
        ("shared", [0]),
        ("node_local", [0, 1, 2]),
        ("two_nodes", [0, 2]),
        ("wrong_topology", [0, 1, 2]),
    ],
)
def test_every_rank_gets_the_value_and_only_needed_ranks_build(gloo_results, name, builders):
    out, results = gloo_results
    assert [r[name] for r in results] == [{"ok": True, "value": VALUE}] * 3
    assert _builds(out, name) == builders


@pytest.mark.distributed
def test_rank0_failure_raises_distributed_error_on_the_others(gloo_results):
    out, results = gloo_results
    first = results[0]["rank0_fails"]
    assert (first["ok"], first["type"], first["message"]) == (
        False,
        "ValueError",
        "boom from rank 0",
    )
    for other in results[1:]:
        got = other["rank0_fails"]
        assert (got["ok"], got["type"]) == (False, "DistributedError")
        assert "rank 0: ValueError: boom from rank 0" in got["message"]
    assert _builds(out, "rank0_fails") == []


@pytest.mark.distributed
def test_rank0_os_error_becomes_cache_error_naming_path_to_cache(gloo_results):
    _, results = gloo_results
    first = results[0]["rank0_oserror"]
    assert first["type"] == "CacheError" and "path_to_cache" in first["message"]
    assert "/readonly/cache" in first["message"]
    assert all(r["rank0_oserror"]["type"] == "DistributedError" for r in results[1:])


@pytest.mark.distributed
def test_node_leader_failure_stops_every_rank(gloo_results):
    out, results = gloo_results
    assert results[2]["leader_fails"]["type"] == "RuntimeError"
    for r in results[:2]:
        assert r["leader_fails"]["type"] == "DistributedError"
        assert "rank 2: RuntimeError: disk full on node B" in r["leader_fails"]["message"]
    assert _builds(out, "leader_fails") == [0]


@pytest.mark.distributed
def test_ranks_not_built_get_none_and_group_survives(gloo_results):
    out, results = gloo_results
    assert [r["not_built"]["value"] for r in results] == [VALUE, None, VALUE]
    assert _builds(out, "not_built") == [0]
    assert [r["unsynchronized"]["value"] for r in results] == [VALUE] * 3
    assert _builds(out, "unsynchronized") == [0, 1, 2]
    assert all(r["after"] == [0, 1, 2] for r in results)


def test_single_process_just_constructs(tmp_path):
    calls = []
    assert build_on_rank0_then_load(lambda: calls.append(1) or "x") == "x"
    assert calls == [1]
    comm = get_communicator()
    assert (comm.rank, comm.world_size, comm.all_gather) == (0, 1, None)


def test_explicit_world_without_process_group_is_a_clear_error():
    comm = get_communicator(rank=1, world_size=2, local_rank=0, local_world_size=1)
    with pytest.raises(DistributedError, match="init_process_group"):
        build_on_rank0_then_load(lambda: 1, comm=comm)
    # without synchronisation every rank builds on its own, no collective needed
    assert build_on_rank0_then_load(lambda: 1, comm=comm, synchronize=False) == 1
    assert (
        build_on_rank0_then_load(
            lambda: 1, comm=comm, synchronize=False, is_built_on_rank=lambda: False
        )
        is None
    )


@pytest.mark.parametrize(
    "env, match",
    [
        ({"LOCAL_RANK": "one"}, "LOCAL_RANK='one'"),
        ({"LOCAL_RANK": "3", "LOCAL_WORLD_SIZE": "2"}, "LOCAL_RANK and LOCAL_WORLD_SIZE"),
    ],
)
def test_bad_local_rank_environment(monkeypatch, env, match):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(DistributedError, match=match):
        get_communicator(rank=3, world_size=4)


def test_topology_from_env_and_node_leader(monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    comm = get_communicator(rank=3, world_size=4)
    assert isinstance(comm, Communicator)
    assert (comm.local_rank, comm.local_world_size, comm.node_leader) == (1, 2, 2)


def test_os_error_on_a_single_process_is_not_wrapped():
    with pytest.raises(PermissionError):
        build_on_rank0_then_load(lambda: (_ for _ in ()).throw(PermissionError("denied")))
    assert issubclass(CacheError, OSError)


if __name__ == "__main__":
    worker(sys.argv[2])

"""``ranks_not_seeing``: the token file rank 0 writes, read by every rank in its folder.

Two ranks are threads of this process here, exchanging through a barrier (the
collective's semantics); on real gloo groups see tests/builder/test_cold_build.py.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from tokenloom.distributed import Communicator
from tokenloom.distributed.visibility import TOKEN_PREFIX, ranks_not_seeing


def _threads(folders):
    world = len(folders)
    slots: list = [None] * world
    barrier = threading.Barrier(world)

    def comm(rank):
        def all_gather(obj):
            slots[rank] = obj
            barrier.wait(timeout=30)
            every = list(slots)
            barrier.wait(timeout=30)
            return every

        return Communicator(rank, world, rank, world, all_gather)

    with ThreadPoolExecutor(world) as pool:
        futures = [pool.submit(ranks_not_seeing, comm(r), folders[r]) for r in range(world)]
        return [f.result(timeout=60) for f in futures]


def test_a_shared_folder_is_seen_by_all_and_the_token_removed(tmp_path):
    assert _threads([str(tmp_path)] * 3) == [[], [], []]
    assert not list(tmp_path.glob(TOKEN_PREFIX + "*"))


def test_ranks_with_another_folder_or_none_are_named(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "unrelated").write_text("x")
    folders = [str(tmp_path / "shared"), str(tmp_path / "shared"), str(other), None]
    assert _threads(folders) == [[2, 3]] * 4


def test_without_a_folder_on_rank0_no_rank_counts_as_seeing(tmp_path):
    assert _threads([None, str(tmp_path)]) == [[0, 1]] * 2


def test_a_single_process_needs_no_token(tmp_path):
    assert ranks_not_seeing(Communicator(0, 1, 0, 1), str(tmp_path)) == []
    assert not list(tmp_path.iterdir())

"""Finding and stopping a private cluster's leftover processes through /proc (no Ray needed)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tokenloom.preprocess.ray_engine.processes import ray_descendants, stop_processes

pytestmark = [
    pytest.mark.processes,
    pytest.mark.timeout(60),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc"),
]


def _sleeper(tag: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time, sys; time.sleep(60)", tag])


def test_only_ray_descendants_are_found_and_stopped() -> None:
    ray_like, other = _sleeper("ray::FakeAgent"), _sleeper("innocent")
    try:
        found = ray_descendants()
        assert ray_like.pid in found and other.pid not in found
        assert stop_processes({ray_like.pid: found[ray_like.pid]}, grace=0.2) == [ray_like.pid]
        assert ray_like.wait(timeout=10) < 0  # killed by a signal
        assert other.poll() is None
    finally:
        for proc in (ray_like, other):
            proc.kill()
            proc.wait()


def test_exited_processes_and_reused_pids_are_left_alone() -> None:
    quick = subprocess.Popen([sys.executable, "-c", "pass", "ray"])
    quick.wait()
    assert stop_processes({quick.pid: 1}, grace=0.1) == []
    alive = _sleeper("ray-other-start-time")
    try:
        found = ray_descendants()
        assert stop_processes({alive.pid: found[alive.pid] + 1}, grace=0.1) == []
        assert alive.poll() is None
    finally:
        alive.kill()
        alive.wait()

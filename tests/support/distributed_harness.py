"""Launch real gloo process groups for the distributed tests (no tests of its own).

Each rank is a fresh ``python <script> <scenario> <out_dir>`` subprocess with the
usual launcher environment (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE) and a
``file://`` rendezvous in a temporary directory, so nothing touches the network
beyond 127.0.0.1.  A rank that does not finish within ``timeout`` seconds fails
the test (all ranks are killed): a hang can never stall the suite.

A worker script calls :func:`init_worker` and :func:`write_result`; the test reads
the per-rank results with :func:`launch`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Optional

import pytest

ROOT = str(Path(__file__).resolve().parents[2])
SRC = str(Path(ROOT) / "src")


def launch(
    script: str,
    scenario: str,
    out_dir: Path,
    world_size: int,
    *,
    local_ranks: Optional[Sequence[int]] = None,
    local_world_sizes: Optional[Sequence[int]] = None,
    timeout: float = 120.0,
    may_die: Sequence[int] = (),
    env_extra: Optional[dict[str, str]] = None,
) -> list[Optional[dict]]:
    """Run ``scenario`` of ``script`` on ``world_size`` gloo ranks; return each rank's result.

    Ranks in ``may_die`` may exit with an error (a test that kills them); their result
    is None when they wrote none. ``env_extra`` is added to every rank's environment."""
    pytest.importorskip("torch.distributed", reason="torch is needed for gloo process groups")
    out_dir.mkdir(parents=True, exist_ok=True)
    rendezvous = out_dir / "rendezvous"
    procs = []
    for rank in range(world_size):
        env = dict(os.environ)
        env.update(
            RANK=str(rank),
            WORLD_SIZE=str(world_size),
            INIT_METHOD=f"file://{rendezvous}",
            PYTHONPATH=os.pathsep.join([SRC, ROOT, env.get("PYTHONPATH", "")]),
            OMP_NUM_THREADS="1",
        )
        env.update(env_extra or {})
        if local_ranks is not None:
            env["LOCAL_RANK"] = str(local_ranks[rank])
            env["LOCAL_WORLD_SIZE"] = str(local_world_sizes[rank])
        else:
            env.pop("LOCAL_RANK", None)
            env.pop("LOCAL_WORLD_SIZE", None)
        log = open(out_dir / f"rank{rank}.log", "w")
        procs.append(
            (
                subprocess.Popen(
                    [sys.executable, script, scenario, str(out_dir)],
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                ),
                log,
            )
        )
    _wait_all(procs, timeout, out_dir, may_die)
    results = [out_dir / f"rank{rank}.json" for rank in range(world_size)]
    return [
        json.loads(path.read_text()) if rank not in may_die or path.exists() else None
        for rank, path in enumerate(results)
    ]


def _wait_all(procs, timeout: float, out_dir: Path, may_die: Sequence[int] = ()) -> None:
    deadline = time.monotonic() + timeout
    try:
        for proc, _ in procs:
            remaining = max(0.1, deadline - time.monotonic())
            try:
                proc.wait(timeout=remaining)
            except subprocess.TimeoutExpired:
                pytest.fail(f"a rank hung for more than {timeout}s; logs: {_logs(out_dir)}")
    finally:
        for proc, log in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            log.close()
    bad = [i for i, (proc, _) in enumerate(procs) if proc.returncode != 0 and i not in may_die]
    if bad:
        pytest.fail(f"ranks {bad} exited with an error; logs: {_logs(out_dir)}")


def _logs(out_dir: Path) -> str:
    return "\n".join(
        f"--- {p.name}\n{p.read_text()[-4000:]}" for p in sorted(out_dir.glob("rank*.log"))
    )


def init_worker():
    """Join the gloo group described by the environment; return (rank, world_size)."""
    import datetime

    import torch.distributed as dist

    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group(
        "gloo",
        init_method=os.environ["INIT_METHOD"],
        rank=rank,
        world_size=world_size,
        timeout=datetime.timedelta(seconds=60),
    )
    return rank, world_size


def write_result(out_dir: str, rank: int, result: dict) -> None:
    """Store this rank's result for :func:`launch` (atomically)."""
    path = Path(out_dir) / f"rank{rank}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result))
    os.replace(tmp, path)


def outcome(fn) -> dict:
    """Run ``fn``; describe its value or the error it raised (for cross-rank assertions)."""
    try:
        return {"ok": True, "value": fn()}
    except Exception as error:  # noqa: BLE001 - the test inspects it
        return {"ok": False, "type": type(error).__name__, "message": str(error)}

"""Faults on real Ray clusters: a node lost mid-run, a driver killed mid-run, and no Ray
process left behind by a private cluster.  Each is compared with the local engine."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tests.ray.ray_helpers as helpers
from tests.ray.ray_helpers import (
    RAY_ENV,
    NodeCueTokenizer,
    local_run,
    processes_mentioning,
    same_bytes,
    wait_for_no_processes,
    write_corpus,
)
from tests.support.waiting import poll, wait_until

from tokenloom.preprocess.ray_engine import plan_shards, preprocess_ray
from tokenloom.preprocess.ray_engine.processes import ray_descendants, stop_processes

pytestmark = [pytest.mark.ray, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def short_tmp() -> Iterator[str]:
    """A short folder for Ray's session files (its socket paths must stay short)."""
    path = tempfile.mkdtemp(prefix="tlr-")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _wait_for_markers(folder: Path, count: int, timeout: float, proc: Any = None) -> list:
    def finished() -> list:
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"the driver ended early: {proc.communicate()}")
        found = sorted(folder.glob("*.done.json")) if folder.exists() else []
        return found if len(found) >= count else []

    return wait_until(finished, timeout, f"{count} finished shards in {folder}", interval=0.1)


def _wait_until_busy(cue: Path, timeout: float) -> None:
    """Until ``cue`` was touched in the last 0.3 s: a shard is being tokenised on its node.

    Pass the node's ``holding-`` cue: a batch touches it only while it is held, so the
    shard cannot finish between this wait and the node's removal (the ordinary cue is
    also touched by a last batch that then ends, and the run saw no retry).
    """
    if not poll(lambda: cue.exists() and time.time() - cue.stat().st_mtime < 0.3, timeout):
        seen = sorted(p.name for p in cue.parent.iterdir())
        pytest.fail(f"no shard ran on the node {cue.name} within {timeout} s (cues: {seen})")


@pytest.mark.timeout(240)
def test_node_lost_mid_run_gives_the_local_bytes(
    tmp_path: Path,
    short_tmp: str,
    hf_tokenizer: Any,
    real_texts: list,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    from ray import cloudpickle

    paths = write_corpus(tmp_path / "in", real_texts * 2, files=2, gzip_last=False)
    cues = tmp_path / "cues"
    cues.mkdir()
    slow = NodeCueTokenizer(hf_tokenizer, str(cues), delay=0.15)
    monkeypatch.setenv("RAY_TMPDIR", short_tmp)
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "include_dashboard": False, "node_ip_address": "127.0.0.1"},
    )
    cloudpickle.register_pickle_by_value(helpers)
    try:
        worker = cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1")
        ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
        result: dict = {}

        def run() -> None:
            try:
                result["summary"] = preprocess_ray(
                    paths,
                    str(tmp_path / "out"),
                    slow,
                    num_shards=8,
                    chunk_bytes=16384,
                    show_progress=False,
                )
            except BaseException as error:  # reported by the main thread
                result["error"] = error

        # Held from the start, the worker's first batch stays in progress: the head works
        # through the other shards meanwhile, and removing the node always hits running
        # work (holding only after some shards had finished once found no shard left on
        # the worker within 90 s, and the run saw no retry).
        NodeCueTokenizer.hold(str(cues), worker.node_id)
        thread = threading.Thread(target=run)
        thread.start()
        _wait_until_busy(cues / f"holding-{worker.node_id}", timeout=120)
        _wait_for_markers(tmp_path / "out_shards", 1, timeout=120)  # mid-run: some are done
        cluster.remove_node(worker, allow_graceful=False)
        thread.join(timeout=180)
        assert not thread.is_alive() and "error" not in result, result.get("error")
    finally:
        started = ray_descendants()
        ray.shutdown()
        cluster.shutdown()
        stop_processes(started)
        cloudpickle.unregister_pickle_by_value(helpers)
    summary = result["summary"]
    assert summary.retries >= 1  # the lost node's shard ran again
    local = local_run(paths, str(tmp_path / "local"), hf_tokenizer)
    assert same_bytes(str(tmp_path / "local"), str(tmp_path / "out"))
    assert summary.documents == local.documents
    assert wait_for_no_processes(short_tmp, timeout=30) == []


_DRIVER = """
import json, sys
sys.path.insert(0, {repo!r})
from ray import cloudpickle
import tests.ray.ray_helpers as helpers
from tokenloom.preprocess.ray_engine import preprocess_ray
from tokenloom.tokenizers import load_tokenizer
cloudpickle.register_pickle_by_value(helpers)
tokenizer = helpers.CueTokenizer(load_tokenizer({spec!r}), "unused")
summary = preprocess_ray({paths!r}, {out!r}, tokenizer, num_shards=8, num_cpus=2,
                         chunk_bytes=16384, show_progress=False)
print(json.dumps({{"reused": summary.reused, "shards": len(summary.shards)}}))
"""


def _driver(tmp_path: Path, ray_tmp: str, spec: str, paths: list, delay: float) -> Any:
    script = tmp_path / f"driver-{delay}.py"
    script.write_text(
        _DRIVER.format(repo=str(REPO), spec=spec, paths=paths, out=str(tmp_path / "out"))
    )
    env = {**os.environ, **RAY_ENV, "RAY_TMPDIR": ray_tmp, "TL_TEST_DELAY": str(delay)}
    return subprocess.Popen(
        [sys.executable, str(script)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


@pytest.mark.timeout(360)
def test_killed_driver_then_rerun_reuses_finished_shards(
    tmp_path: Path, short_tmp: str, hf_path: str, hf_tokenizer: Any, real_texts: list
) -> None:
    paths = write_corpus(tmp_path / "in", real_texts * 2, files=2, gzip_last=False)
    spec = f"hf:{hf_path}"
    first_tmp, second_tmp = os.path.join(short_tmp, "a"), os.path.join(short_tmp, "b")
    driver = _driver(tmp_path, first_tmp, spec, paths, delay=0.25)
    try:
        finished = _wait_for_markers(tmp_path / "out_shards", 2, timeout=150, proc=driver)
        assert processes_mentioning(first_tmp)  # the check sees the private cluster
        driver.send_signal(signal.SIGKILL)
        driver.wait(timeout=30)
    finally:
        if driver.poll() is None:
            driver.kill()
    kept = {path.name: (path.stat().st_mtime_ns, path.read_bytes()) for path in finished}
    rerun = _driver(tmp_path, second_tmp, spec, paths, delay=0.0)
    out, err = rerun.communicate(timeout=200)
    assert rerun.returncode == 0, err
    report = json.loads(out.strip().splitlines()[-1])
    assert report["shards"] == len(plan_shards(paths, 8))
    assert len(kept) <= report["reused"] < report["shards"]
    for name, (mtime, data) in kept.items():  # finished shards were not redone
        marker = tmp_path / "out_shards" / name
        assert not marker.exists() or (marker.stat().st_mtime_ns, marker.read_bytes()) == (
            mtime,
            data,
        )
    local_run(paths, str(tmp_path / "local"), hf_tokenizer)
    assert same_bytes(str(tmp_path / "local"), str(tmp_path / "out"))
    assert wait_for_no_processes(second_tmp, timeout=30) == []
    # Ray's reaper stops the killed driver's cluster; its agents notice within a minute or so
    assert wait_for_no_processes(first_tmp, timeout=120) == []


@pytest.mark.timeout(180)
def test_cli_private_cluster_leaves_no_process_behind(
    tmp_path: Path, short_tmp: str, hf_path: str, hf_tokenizer: Any, real_texts: list
) -> None:
    paths = write_corpus(tmp_path / "in", real_texts, files=2)
    env = {**os.environ, **RAY_ENV, "RAY_TMPDIR": short_tmp}
    command = [
        sys.executable,
        "-m",
        "tokenloom",
        "preprocess",
        "--engine",
        "ray",
        "--num-shards",
        "3",
        "--input",
        *paths,
        "--output-prefix",
        str(tmp_path / "out"),
        "--tokenizer",
        f"hf:{hf_path}",
        "--append-eod",
        "--no-progress",
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=150)
    assert done.returncode == 0, done.stderr
    assert "0 of 3 shards reused" in done.stdout
    assert os.path.isdir(os.path.join(short_tmp, "ray"))  # Ray used RAY_TMPDIR
    assert processes_mentioning(short_tmp) == []  # nothing left once the command returned
    local_run(paths, str(tmp_path / "local"), hf_tokenizer, append_eod=True)
    assert same_bytes(str(tmp_path / "local"), str(tmp_path / "out"))

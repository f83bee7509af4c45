"""Real signals on a real ``tokenloom preprocess --workers 2``: Ctrl-C (SIGINT to the
process group, as a terminal sends it) and a worker SIGKILLed (as the OOM killer does).
Both end within seconds, print one line without a traceback and publish nothing."""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.tokenizer_models import hf_path, real_texts  # noqa: F401
from tests.support.waiting import gone, wait_until

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc")


@pytest.fixture(autouse=True)
def _dump_stacks_on_hang():
    faulthandler.dump_traceback_later(110, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture(scope="module")
def big_input(tmp_path_factory) -> Path:
    """~60 MB of JSONL: many seconds of work for two workers with a real BPE."""
    path = tmp_path_factory.mktemp("input") / "big.jsonl"
    line = json.dumps({"text": "The quick brown fox jumps over the lazy dog. " * 40}) + "\n"
    path.write_text(line * (60_000_000 // len(line)))
    return path


def _children(pid: int) -> list:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(child) for child in text.split()]


def _command(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _workers(pid: int) -> list:
    """Live preprocess workers: the children of the forkserver below ``pid``."""
    servers = [child for child in _children(pid) if b"forkserver" in _command(child)]
    return [worker for server in servers for worker in _children(server)]


def _start(big_input: Path, out: Path, hf_path: str) -> subprocess.Popen:  # noqa: F811
    command = [
        sys.executable,
        "-m",
        "tokenloom",
        "preprocess",
        "--input",
        str(big_input),
        "--output-prefix",
        str(out / "web"),
        "--tokenizer",
        f"hf:{hf_path}",
        "--workers",
        "2",
        "--chunk-mb",
        "0.5",
        "--no-progress",
    ]
    return subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True, text=True
    )


def _wait_until_encoding(process: subprocess.Popen, out: Path) -> list:
    def encoding() -> list:
        if process.poll() is not None:
            pytest.fail(f"preprocess ended before it could be interrupted: {process.stderr.read()}")
        workers = _workers(process.pid)
        writing = any(
            name.endswith(".tmp") and os.path.getsize(out / name) > 0 for name in os.listdir(out)
        )
        return workers if len(workers) >= 2 and writing else []

    return wait_until(encoding, 60, "two preprocess workers writing their shards")


def _finish(process: subprocess.Popen, within: float):
    """The exit status and stderr; fails if the process is still running ``within``
    seconds from now (a hang, not a slow machine: the bound is generous)."""
    try:
        _, stderr = process.communicate(timeout=within)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        pytest.fail(f"still running {within} s after the signal")
    return process.returncode, stderr


def _published(out: Path) -> list:
    return sorted(name for name in os.listdir(out) if not name.startswith("."))


@pytest.mark.slow
@pytest.mark.timeout(100)
def test_ctrl_c_exits_130_quickly_without_traceback_or_output(big_input, tmp_path, hf_path):  # noqa: F811
    process = _start(big_input, tmp_path, hf_path)
    workers = _wait_until_encoding(process, tmp_path)
    os.killpg(process.pid, signal.SIGINT)  # what a terminal does on Ctrl-C
    code, stderr = _finish(process, within=30)
    assert code == 130
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    assert stderr.strip().splitlines() == ["tokenloom preprocess: interrupted"]
    assert _published(tmp_path) == []
    assert [name for name in os.listdir(tmp_path) if name.endswith(".tmp")] == []
    wait_until(lambda: all(gone(pid) for pid in workers), 10, f"workers {workers} exited")


@pytest.mark.slow
@pytest.mark.timeout(100)
def test_sigkilled_worker_names_the_worker_and_shard_and_publishes_nothing(
    big_input, tmp_path, hf_path
):  # noqa: F811
    process = _start(big_input, tmp_path, hf_path)
    workers = _wait_until_encoding(process, tmp_path)
    os.kill(workers[0], signal.SIGKILL)  # the out-of-memory killer
    code, stderr = _finish(process, within=30)
    assert code == 1
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    assert "preprocess worker" in lines[0] and "killed by signal SIGKILL" in lines[0]
    assert f"input shard {big_input} from line" in lines[0]
    assert _published(tmp_path) == []

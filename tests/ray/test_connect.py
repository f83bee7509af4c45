"""`--engine ray --address` that names no cluster: one clear line within the bound, never a
hang; the numeric options of the Ray engine refused before any cluster starts.

The CLI runs in a subprocess with a timeout (without the bound, Ray retries the GCS for
many minutes and the subprocess would be killed at the timeout).  The only cluster here
is a real one bound to 127.0.0.1 (``ray.cluster_utils.Cluster``), for the working case.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.ray.ray_helpers import RAY_ENV, local_run, same_bytes

from tokenloom.errors import ConfigError
from tokenloom.preprocess.ray_engine import preprocess_ray
from tokenloom.preprocess.ray_engine.connect import connect_timeout_s, parse_address
from tokenloom.preprocess.ray_engine.processes import ray_descendants, stop_processes

pytestmark = [pytest.mark.ray, pytest.mark.timeout(240)]
REPO = Path(__file__).resolve().parents[2]
BOUND_S = 4
STARTUP_S = 30  # interpreter, tokenloom and Ray imports on a loaded machine


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _corpus(folder: Path) -> Path:
    path = folder / "in.jsonl"
    path.write_text("".join(f'{{"text": "line {i} of the corpus"}}\n' for i in range(20)))
    return path


def _cli(folder: Path, *flags: str, env: Any = None, timeout: float = 120) -> tuple:
    """Run ``tokenloom preprocess --engine ray`` on a tiny corpus; (rc, stderr, seconds)."""
    command = [sys.executable, "-m", "tokenloom", "preprocess", "--input", str(_corpus(folder))]
    command += ["--output-prefix", str(folder / "out"), "--tokenizer", "bytes", "--engine", "ray"]
    full_env = {**os.environ, **RAY_ENV, "PYTHONPATH": str(REPO / "src"), **(env or {})}
    started = time.monotonic()
    done = subprocess.run(
        command + list(flags),
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
        cwd=folder,
    )
    return done.returncode, done.stderr, time.monotonic() - started


def _one_error_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.startswith("tokenloom preprocess:")]
    assert len(lines) == 1 and ": error: " in lines[0], stderr
    return lines[0]


def test_a_closed_port_fails_within_the_bound_naming_the_address(tmp_path: Path) -> None:
    port = _closed_port()
    env = {"TOKENLOOM_RAY_CONNECT_TIMEOUT_S": str(BOUND_S)}
    rc, stderr, seconds = _cli(tmp_path, "--address", f"127.0.0.1:{port}", env=env)
    line = _one_error_line(stderr)
    assert rc == 1 and seconds < BOUND_S + STARTUP_S, (rc, seconds, stderr)
    assert f"--address 127.0.0.1:{port}: no Ray cluster answers there" in line
    assert "refused" in line
    assert f"`ray start --head --node-ip-address=127.0.0.1 --port={port}`" in line
    assert "drop --address to run on a private local cluster" in line
    assert not (tmp_path / "out_text_document.bin").exists()


def test_an_unresolvable_host_fails_within_the_bound(tmp_path: Path) -> None:
    address = "no-such-host.invalid:6379"  # .invalid never resolves (RFC 2606)
    env = {"TOKENLOOM_RAY_CONNECT_TIMEOUT_S": str(BOUND_S)}
    rc, stderr, seconds = _cli(tmp_path, "--address", address, env=env)
    line = _one_error_line(stderr)
    assert rc == 1 and seconds < BOUND_S + STARTUP_S, (rc, seconds, stderr)
    assert f"--address {address}: no Ray cluster answers there" in line
    assert "'no-such-host.invalid'" in line and "check the host and the port" in line


def test_an_open_port_that_is_not_ray_fails_at_the_bound(tmp_path: Path) -> None:
    """The TCP probe passes; ray.init would retry forever: the bounded wait ends it."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)  # connections queue up; nothing ever answers as Ray would
        port = listener.getsockname()[1]
        rc, stderr, seconds = _cli(
            tmp_path, "--address", f"127.0.0.1:{port}", "--connect-timeout", str(BOUND_S)
        )
    line = _one_error_line(stderr)
    assert rc == 1 and BOUND_S <= seconds < BOUND_S + STARTUP_S, (rc, seconds, stderr)
    assert f"something listens on 127.0.0.1:{port}, but ray.init did not connect within" in line
    assert "--connect-timeout" in line


def test_a_ray_client_address_probes_the_client_port(tmp_path: Path) -> None:
    port = _closed_port()
    rc, stderr, _ = _cli(
        tmp_path, "--address", f"ray://127.0.0.1:{port}", "--connect-timeout", str(BOUND_S)
    )
    line = _one_error_line(stderr)
    assert rc == 1 and f"--ray-client-server-port={port}" in line


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--num-shards", "0"], "--num-shards 0: use a whole number from 1 to 99999"),
        (["--num-shards", "-3"], "--num-shards -3: use a whole number from 1 to 99999"),
        (["--num-shards", "100000"], "--num-shards 100000: use a whole number from 1 to 99999"),
        (["--max-retries", "-1"], "--max-retries -1: use a whole number from 0 to 100"),
        (["--max-retries", "1000"], "--max-retries 1000: use a whole number from 0 to 100"),
        (["--connect-timeout", "0"], "--connect-timeout / connect_timeout_s 0.0: give a number"),
        (["--connect-timeout", "nan"], "--connect-timeout / connect_timeout_s nan"),
        (["--connect-timeout", "inf"], "--connect-timeout / connect_timeout_s inf"),
        (["--connect-timeout", "-2"], "--connect-timeout / connect_timeout_s -2.0"),
        (["--address", "10.0.0.1"], "--address 10.0.0.1: give auto, HOST:PORT"),
        (["--address", "host:99999"], "--address host:99999: give auto, HOST:PORT"),
        (["--workers", "0"], "--workers 0: must be an integer >= 1"),
    ],
)
def test_bad_numbers_are_one_line_before_any_cluster_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture, flags: list, message: str
) -> None:
    from tokenloom.cli.main import main

    corpus = _corpus(tmp_path)
    argv = ["preprocess", "--input", str(corpus), "--output-prefix", str(tmp_path / "out")]
    argv += ["--tokenizer", "bytes", "--engine", "ray", *flags]
    assert main(argv) == 1
    line = _one_error_line(capsys.readouterr().err)
    assert message in line, line


def test_a_bad_connect_timeout_in_the_environment_is_refused(monkeypatch) -> None:
    for value in ("abc", "0", "-1", "nan", "1e9"):
        monkeypatch.setenv("TOKENLOOM_RAY_CONNECT_TIMEOUT_S", value)
        with pytest.raises(ConfigError, match=f"TOKENLOOM_RAY_CONNECT_TIMEOUT_S {value!r}"):
            connect_timeout_s()
    monkeypatch.setenv("TOKENLOOM_RAY_CONNECT_TIMEOUT_S", "2.5")
    assert connect_timeout_s() == 2.5 and connect_timeout_s(7) == 7.0
    monkeypatch.delenv("TOKENLOOM_RAY_CONNECT_TIMEOUT_S")
    assert connect_timeout_s() == 15.0


@pytest.mark.parametrize(
    "options, message",
    [
        ({"num_shards": 0}, "--num-shards 0"),
        ({"num_shards": 2.5}, "--num-shards 2.5"),
        ({"num_shards": True}, "--num-shards True"),
        ({"max_retries": -1}, "--max-retries -1"),
        ({"num_cpus": 0}, "num_cpus 0"),
        ({"num_cpus": 1.5}, "num_cpus 1.5"),
        ({"num_cpus": 10**6}, "num_cpus 1000000"),
        ({"workers": 0}, "--workers 0"),
        ({"workers": float("nan")}, "--workers nan"),
        ({"connect_timeout_s": 0}, "connect_timeout_s 0"),
    ],
)
def test_the_library_refuses_bad_numbers_before_any_cluster_starts(
    tmp_path: Path, options: dict, message: str
) -> None:
    with pytest.raises(ConfigError, match=message.replace("+", r"\+")):
        preprocess_ray([str(_corpus(tmp_path))], str(tmp_path / "out"), "bytes", **options)


def test_addresses_are_parsed_as_ray_reads_them(monkeypatch) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert parse_address("auto") is None
    assert parse_address("10.1.2.3:6380").port == 6380
    assert parse_address("ray://head.example").port == 10001
    assert parse_address("[::1]:6379").host == "::1"
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:7000")
    target = parse_address("auto")
    assert target is not None and (target.host, target.port) == ("127.0.0.1", 7000)


@pytest.fixture
def loopback_cluster() -> Iterator[Any]:
    """A real one-node Ray cluster bound to 127.0.0.1, not connected from this process."""
    pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    temp_dir = tempfile.mkdtemp(prefix="tlrc-")
    old = os.environ.get("RAY_TMPDIR")
    os.environ["RAY_TMPDIR"] = temp_dir
    cluster = Cluster(
        initialize_head=True,
        connect=False,
        head_node_args={"num_cpus": 2, "include_dashboard": False, "node_ip_address": "127.0.0.1"},
    )
    try:
        yield cluster
    finally:
        started = ray_descendants()
        cluster.shutdown()
        stop_processes(started)
        if old is None:
            os.environ.pop("RAY_TMPDIR", None)
        else:
            os.environ["RAY_TMPDIR"] = old
        shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.mark.slow
def test_a_cluster_at_the_address_is_used_and_left_running(
    tmp_path: Path, loopback_cluster: Any
) -> None:
    address = loopback_cluster.address
    assert address.startswith("127.0.0.1:"), address
    rc, stderr, _ = _cli(tmp_path, "--address", address, "--num-shards", "2", timeout=180)
    assert rc == 0, stderr
    from tokenloom.tokenizers import load_tokenizer

    local_run([str(tmp_path / "in.jsonl")], str(tmp_path / "local"), load_tokenizer("bytes"))
    assert same_bytes(str(tmp_path / "local"), str(tmp_path / "out"))
    assert loopback_cluster.head_node.remaining_processes_alive()

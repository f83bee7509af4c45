"""A process whose work is done exits at once: the kernel loader's thread is never
waited for at exit, a compile still running is abandoned outside LLVM and outside
numba's cache write, and what it leaves in numba's cache serves the next process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("numba")
pytestmark = pytest.mark.processes  # every test here runs real child processes

ROOT = Path(__file__).resolve().parents[2]

NEVER_ENDING_TASK = textwrap.dedent("""
    import threading
    from tokenloom.kernels import KERNELS
    started = threading.Event()
    KERNELS.submit(lambda: (started.set(), threading.Event().wait(300)))
    assert started.wait(60)
    print("done", flush=True)
""")


def _env(numba_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TOKENLOOM_DISABLE_NUMBA"}
    env.update(NUMBA_CACHE_DIR=str(numba_dir), PYTHONPATH=str(ROOT / "src"), **extra)
    return env


@pytest.mark.timeout(120)
def test_a_process_exits_while_its_background_task_still_runs(tmp_path):
    """Before, the loader thread was joined at exit (for up to 120 s)."""
    child = subprocess.Popen(
        [sys.executable, "-c", NEVER_ENDING_TASK],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(tmp_path),
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "done\n"
        assert child.wait(timeout=60) == 0  # the task waits 300 s: not waited for
    finally:
        child.kill()
        _, stderr = child.communicate()
    assert stderr == ""


IN_LLVM = textwrap.dedent("""
    import json, threading
    from llvmlite import binding
    from tokenloom.kernels.shutdown import ExitGuard
    GUARD = ExitGuard(park_s=600)  # its own guard, stopping threads for long
    GUARD.install()
    IR = "define i64 @f(i64 %x) {\\n  %y = add i64 %x, 1\\n  ret i64 %y\\n}\\n"
    calls = [0]
    def work():
        while True:
            binding.parse_assembly(IR).verify()
            calls[0] += 1
    threading.Thread(target=work, daemon=True).start()
    while calls[0] < 20:
        pass
    left_all = GUARD.close(timeout=30)
    while not GUARD.stopped():
        pass
    frozen = calls[0]
    for _ in range(100_000):
        assert calls[0] == frozen and GUARD.stopped() == 1 and not GUARD.busy()
    print(json.dumps({"left": left_all, "frozen": calls[0] == frozen}), flush=True)
""")


@pytest.mark.timeout(120)
def test_at_exit_a_thread_calling_llvm_stops_at_its_next_call(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", IN_LLVM],
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        timeout=100,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout) == {"left": True, "frozen": True}


SAMPLES = textwrap.dedent("""
    import json, signal, sys, time
    import numpy
    from tokenloom.builder import BlendedMegatronDatasetBuilder
    from tokenloom.datasets import GPTDataset, GPTDatasetConfig
    from tokenloom.format import IndexedDatasetBuilder
    from tokenloom.kernels import KERNELS
    from tokenloom.kernels.shutdown import GUARD
    folder, mode = sys.argv[1], sys.argv[2]
    prefix = folder + "/corpus"
    if mode == "write":
        rng = numpy.random.default_rng(0)
        builder = IndexedDatasetBuilder(prefix + ".bin", dtype=numpy.uint16)
        for n in rng.integers(5, 200, 60):
            builder.add_item(rng.integers(1, 500, n)); builder.end_document()
        builder.finalize(prefix + ".idx")
        sys.exit(0)
    config = GPTDatasetConfig(random_seed=7, sequence_length=32, blend=([prefix], None),
        split="100,0,0", path_to_cache=folder + "/cache", tokenizer={"vocab_size": 500,
        "eod": 0}, reset_position_ids=False, reset_attention_mask=False,
        eod_mask_loss=False, create_attention_mask=False)
    train = BlendedMegatronDatasetBuilder(GPTDataset, [300, 0, 0], lambda: True,
                                          config).build()[0]
    first = train[0]  # starts loading the sample kernels in the background
    if mode in ("exit", "kill"):
        deadline = time.monotonic() + 300
        while not GUARD.busy() and KERNELS.pending() and time.monotonic() < deadline:
            pass
        print("compiling" if GUARD.busy() else "loaded", flush=True)
        if mode == "kill":
            signal.pause()  # until the test kills this process
        sys.exit(0)
    assert KERNELS.join(600)
    samples = [train[i] for i in range(300)]
    served_by_kernel = train.sampler()[0].sample_kernel is not None
    print(json.dumps({"kernel": served_by_kernel,
                      "sums": [[int(v.sum()) for v in s.values()] for s in samples]}))
""")


def _samples(folder: Path, numba_dir: Path, mode: str, **extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", SAMPLES, str(folder), mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(numba_dir, **extra),
    )


def _finish(child: subprocess.Popen, timeout: float) -> tuple[int, str, str]:
    try:
        stdout, stderr = child.communicate(timeout=timeout)
    finally:
        child.kill()
    return child.returncode, stdout, stderr


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_compiles_cut_by_exit_or_kill_leave_a_cache_the_next_process_uses(tmp_path):
    """A fresh numba cache; processes exit (or are killed) in the middle of the sample
    kernels' compile, at several instants; then a process that needs the kernels loads
    or compiles them from what is left and serves the same samples as numba-free code."""
    numba_dir = tmp_path / "numba"
    assert _finish(_samples(tmp_path, numba_dir, "write"), 120)[0] == 0
    said = []
    for mode, delay in (("exit", 0), ("kill", 0), ("kill", 0.5), ("exit", 0), ("kill", 2.0)):
        child = _samples(tmp_path, numba_dir, mode)
        assert child.stdout is not None
        said.append(child.stdout.readline().strip())
        if mode == "kill":
            try:
                child.wait(timeout=delay)
            except subprocess.TimeoutExpired:
                pass
            child.send_signal(signal.SIGKILL)
        code, _, stderr = _finish(child, 300)
        assert code == (0 if mode == "exit" else -signal.SIGKILL), stderr[-3000:]
        assert mode == "kill" or stderr == "", stderr[-3000:]
    assert "compiling" in said  # at least one cut landed inside the compile
    code, stdout, stderr = _finish(_samples(tmp_path, numba_dir, "check"), 900)
    assert code == 0, stderr[-3000:]
    with_kernels = json.loads(stdout)
    code, stdout, stderr = _finish(
        _samples(tmp_path, numba_dir, "check", TOKENLOOM_DISABLE_NUMBA="1"), 900
    )
    assert code == 0, stderr[-3000:]
    reference = json.loads(stdout)
    assert with_kernels["kernel"] and not reference["kernel"]
    assert with_kernels["sums"] == reference["sums"]

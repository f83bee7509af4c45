"""Issue 18, class 9: a ``.bin`` truncated in place under a live mapping, then read in
the middle of the mapping (no size check runs there), kills the process with SIGBUS;
tokenloom's native handler (``tokenloom.format.sigbus``) makes it name the file first.

Every crash runs in a real subprocess that truncates its own mapped file and reads it:
the test asserts that it died by SIGBUS (as before: the exit status is unchanged) and
what it wrote to stderr."""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy
import pytest

from tokenloom.format import IndexedDataset, IndexedDatasetBuilder
from tokenloom.format.sigbus import REPORTER, SigbusReporter, supported

pytest.importorskip("llvmlite")
pytestmark = pytest.mark.skipif(not supported(), reason="the handler needs Linux on x86_64/aarch64")

ROOT = Path(__file__).resolve().parents[2]
SEQUENCES, LENGTH = 64, 2000  # 256,000 bytes of uint16
LINE = "tokenloom: SIGBUS reading {path} (memory-mapped with {size} bytes; the file shrank"

PRELUDE = """
import json, os, sys
import numpy
from tokenloom.format import IndexedDataset
from tokenloom.format.sigbus import REPORTER
from tokenloom.kernels import KERNELS
prefixes = sys.argv[1:]
def shrink(prefix, size):
    os.truncate(prefix + ".bin", size)
    print("truncated", prefix, flush=True)
"""


def _pair(path: Path, first: int = 1) -> str:
    prefix = str(path)
    builder = IndexedDatasetBuilder(prefix + ".bin", dtype=numpy.uint16)
    for i in range(SEQUENCES):
        builder.add_item(numpy.full(LENGTH, first + i, dtype=numpy.uint16))
        builder.end_document()
    builder.finalize(prefix + ".idx")
    return prefix


@pytest.fixture
def prefix(tmp_path):
    return _pair(tmp_path / "data")


def _crash(script: str, *prefixes: str, env: dict | None = None, flags=()) -> tuple[str, str]:
    """Run ``script`` in a fresh interpreter; it must die by SIGBUS after printing
    ``truncated``. Returns its (stdout, stderr)."""
    environment = {k: v for k, v in os.environ.items() if k != "TOKENLOOM_SIGBUS_HANDLER"}
    environment.update({"TOKENLOOM_DISABLE_NUMBA": "0", **(env or {})})
    done = subprocess.run(
        [sys.executable, *flags, "-c", PRELUDE + textwrap.dedent(script), *prefixes],
        capture_output=True,
        text=True,
        timeout=240,
        env=environment,
        cwd=str(ROOT),
    )
    assert "truncated" in done.stdout, done.stdout + done.stderr[-3000:]
    assert done.returncode == -signal.SIGBUS, (
        f"exit status {done.returncode}, not killed by SIGBUS: {done.stderr[-3000:]}"
    )
    return done.stdout, done.stderr


def _line(prefix: str, size: int = SEQUENCES * LENGTH * 2) -> str:
    return LINE.format(path=f"{prefix}.bin", size=size)


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "read",
    [
        "numpy.array(dataset[40])",  # IndexedDataset.__getitem__, numpy's copy faults
        "dataset.get(40, offset=5, length=100).sum()",  # IndexedDataset.get
        "int(dataset[40][0])",  # one element of the view
    ],
)
@pytest.mark.processes
def test_a_read_in_the_middle_of_a_shrunk_mapping_names_the_file(prefix, read):
    stdout, stderr = _crash(
        f"""
        dataset = IndexedDataset(prefixes[0])
        KERNELS.join()  # the handler is installed in the background, at the first open
        print("expected", json.dumps(REPORTER.describe(numpy.asarray(dataset[0]).ctypes.data)))
        shrink(prefixes[0], 128000)  # sequence 40 starts at byte 160,000: past the end
        {read}
        print("served")
    """,
        prefix,
    )
    assert _line(prefix) in stderr, stderr[-3000:]
    assert "mmap_bin_files=False (IndexedDataset(mmap=False))" in stderr
    # the native handler wrote exactly its readable twin's text
    expected = json.loads(stdout.split("expected ", 1)[1].splitlines()[0])
    assert expected.startswith(_line(prefix)) and expected in stderr
    assert "served" not in stdout


@pytest.mark.timeout(300)
@pytest.mark.processes
def test_a_numba_kernel_reading_a_shrunk_mapping_names_the_file(prefix, tmp_path):
    """``GPTDataset.get_batch``: the batch kernel gathers the tokens (no GIL, no Python)."""
    _, stderr = _crash(
        f"""
        sys.path.insert(0, {str(ROOT)!r})
        from tests.support.dataset_files import small_config
        from tokenloom.datasets import GPTDataset, Split
        config = small_config(prefixes[0], {str(tmp_path / "cache")!r}, split="100,0,0",
                              create_attention_mask=False)
        low = GPTDataset.build_low_level_dataset(prefixes[0], config)
        gpt = GPTDataset(low, prefixes[0], numpy.arange(len(low), dtype=numpy.int32), None,
                         Split.train, config)
        gpt.get_batch([0, 1])
        KERNELS.join()
        gpt.get_batch([0, 1])
        assert KERNELS.get("batch") is not None and REPORTER.installed()
        shrink(prefixes[0], 0)  # every token is gone
        gpt.get_batch(list(range(len(gpt))))
    """,
        prefix,
    )
    assert _line(prefix) in stderr, stderr[-3000:]


@pytest.mark.timeout(300)
@pytest.mark.processes
def test_the_line_names_the_file_that_shrank_among_two(tmp_path):
    first, second = _pair(tmp_path / "first"), _pair(tmp_path / "second", first=100)
    _, stderr = _crash(
        """
        a, b = IndexedDataset(prefixes[0]), IndexedDataset(prefixes[1])
        KERNELS.join()
        int(a[40][0]); int(b[40][0])
        shrink(prefixes[1], 4096)
        int(a[40][0])  # the other file still reads
        int(b[40][0])
    """,
        first,
        second,
    )
    assert _line(second) in stderr and f"{first}.bin" not in stderr, stderr[-3000:]
    assert stderr.count("tokenloom: SIGBUS") == 1


@pytest.mark.timeout(300)
@pytest.mark.parametrize("switch", ["TOKENLOOM_SIGBUS_HANDLER", "TOKENLOOM_DISABLE_NUMBA"])
@pytest.mark.processes
def test_the_opt_outs_restore_the_old_silence(prefix, switch):
    stdout, stderr = _crash(
        """
        dataset = IndexedDataset(prefixes[0])
        KERNELS.join()
        print("installed", REPORTER.installed(), "recorded", len(REPORTER))
        shrink(prefixes[0], 128000)
        int(dataset[40][0])
    """,
        prefix,
        env={switch: "0" if switch == "TOKENLOOM_SIGBUS_HANDLER" else "1"},
    )
    assert "installed False" in stdout and "tokenloom: SIGBUS" not in stderr, stderr[-3000:]
    if switch == "TOKENLOOM_SIGBUS_HANDLER":
        assert "recorded 0" in stdout  # nothing recorded either: zero cost


@pytest.mark.timeout(300)
@pytest.mark.processes
def test_faulthandler_still_prints_its_traceback_after_the_line(prefix):
    """Enabled before the first open (``python -X faulthandler``, pytest's plugin): the
    handler chains to it."""
    _, stderr = _crash(
        """
        dataset = IndexedDataset(prefixes[0])
        KERNELS.join()
        shrink(prefixes[0], 128000)
        int(dataset[40][0])
    """,
        prefix,
        flags=("-X", "faulthandler"),
    )
    line, fatal = stderr.find(_line(prefix)), stderr.find("Fatal Python error: Bus error")
    assert 0 <= line < fatal, stderr[-3000:]
    assert "in <module>" in stderr[fatal:]  # its traceback of the reading thread


@pytest.mark.timeout(300)
@pytest.mark.parametrize("again", ["a later open", "install()"])
@pytest.mark.processes
def test_faulthandler_enabled_later_is_chained_once_the_handler_is_back_on_top(
    prefix, tmp_path, again
):
    """``faulthandler.enable()`` after the first open displaces the handler; the next
    mapping (or ``install()``) puts it back on top, chaining to faulthandler."""
    other = _pair(tmp_path / "other")
    redo = "IndexedDataset(prefixes[1])" if again == "a later open" else "install()"
    _, stderr = _crash(
        f"""
        import faulthandler
        from tokenloom.format.sigbus import install
        dataset = IndexedDataset(prefixes[0])
        KERNELS.join()
        faulthandler.enable()
        assert not REPORTER.installed()
        keep = {redo}
        assert REPORTER.installed()
        shrink(prefixes[0], 128000)
        int(dataset[40][0])
    """,
        prefix,
        other,
    )
    line, fatal = stderr.find(_line(prefix)), stderr.find("Fatal Python error: Bus error")
    assert 0 <= line < fatal, stderr[-3000:]
    assert stderr.count("Fatal Python error") == 1 and stderr.count("tokenloom: SIGBUS") == 1


@pytest.mark.timeout(300)
@pytest.mark.processes
def test_a_sigbus_that_is_not_a_mapped_file_passes_through_unchanged(prefix):
    _, stderr = _crash(
        """
        dataset = IndexedDataset(prefixes[0])
        KERNELS.join()
        assert REPORTER.installed()
        print("truncated (not really)", flush=True)
        os.kill(os.getpid(), 7)  # SIGBUS sent, not a fault
        print("survived")
    """,
        prefix,
    )
    assert "tokenloom: SIGBUS" not in stderr, stderr[-3000:]


@pytest.mark.timeout(300)
@pytest.mark.processes
def test_a_forked_child_names_the_file(prefix):
    stdout, stderr = _crash(
        """
        dataset = IndexedDataset(prefixes[0])
        KERNELS.join()
        pid = os.fork()
        if pid == 0:
            shrink(prefixes[0], 128000)
            int(dataset[40][0])
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        print("child", os.WTERMSIG(status) if os.WIFSIGNALED(status) else -1, flush=True)
        os.kill(os.getpid(), 7)
    """,
        prefix,
    )
    assert "child 7" in stdout and _line(prefix) in stderr, stdout + stderr[-3000:]


@pytest.mark.timeout(300)
@pytest.mark.processes
def test_install_in_a_torch_worker_init_fn_names_the_file_in_a_dataloader_worker(prefix):
    """torch's DataLoader workers install torch's own SIGBUS handler (which blames shared
    memory); ``install()`` in ``worker_init_fn`` puts tokenloom's back on top of it."""
    pytest.importorskip("torch")
    script = """
        import torch.utils.data
        from tokenloom.format.sigbus import install

        class Shrinking(torch.utils.data.Dataset):
            def __init__(self, dataset):
                self.dataset = dataset
            def __len__(self):
                return 1
            def __getitem__(self, i):  # in the worker, after it started
                shrink(prefixes[0], 128000)
                return numpy.array(self.dataset[40])

        dataset = IndexedDataset(prefixes[0])
        KERNELS.join()
        loader = torch.utils.data.DataLoader(
            Shrinking(dataset), batch_size=None, num_workers=1,
            worker_init_fn=lambda worker: install(), multiprocessing_context="fork")
        try:
            list(loader)
        except RuntimeError as error:
            print("error:", error)
    """
    environment = dict(os.environ, TOKENLOOM_DISABLE_NUMBA="0")
    environment.pop("TOKENLOOM_SIGBUS_HANDLER", None)
    done = subprocess.run(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(script), prefix],
        capture_output=True,
        text=True,
        timeout=240,
        env=environment,
        cwd=str(ROOT),
    )
    assert "error: DataLoader worker" in done.stdout, done.stdout + done.stderr[-3000:]
    assert _line(prefix) in done.stderr, done.stderr[-3000:]
    assert done.stderr.find(_line(prefix)) < done.stderr.find("bus error encountered in worker")


# -- the table, in this process ------------------------------------------------------------
def test_a_closed_dataset_leaves_the_table(prefix):
    gc.collect()  # mappings of earlier tests' garbage leave the table now, not below
    before = len(REPORTER)
    dataset = IndexedDataset(prefix)
    address = numpy.asarray(dataset[0]).ctypes.data
    assert len(REPORTER) == before + 2  # the .idx and the .bin
    assert REPORTER.describe(address).startswith(_line(prefix))
    view = dataset[3]
    dataset.close()
    gc.collect()
    assert REPORTER.describe(address) is not None  # a view keeps the mapping alive
    del view, dataset
    gc.collect()
    assert REPORTER.describe(address) is None and len(REPORTER) == before


def test_the_table_is_bounded_and_clearable(tmp_path):
    table = SigbusReporter(capacity=2)
    first = table.register(1 << 20, 4096, str(tmp_path / "a.bin"))
    second = table.register(2 << 20, 4096, "b" * 2000)  # a long path keeps its tail
    assert table.register(3 << 20, 4096, "c.bin") == (-1, 0) and len(table) == 2
    assert "a.bin (memory-mapped with 4096 bytes" in table.describe((1 << 20) + 10)
    assert "...bbbb" in table.describe(2 << 20) and table.describe(3 << 20) is None
    table.unregister(*first)
    table.unregister(*first)  # twice: a no-op
    third = table.register(3 << 20, 8192, "c.bin")
    assert third[0] == first[0] and third[1] != first[1]
    table.unregister(*first)  # stale: the row belongs to c.bin now
    assert "c.bin (memory-mapped with 8192 bytes" in table.describe((3 << 20) + 8191)
    assert table.describe((3 << 20) + 8192) is None  # one past the end
    table.clear()
    assert len(table) == 0 and table.describe(3 << 20) is None
    table.unregister(*second)  # cleared: a no-op
    assert table.register(4 << 20, 1, "d.bin")[0] >= 0

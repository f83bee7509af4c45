"""Issue 9, item 6: a ``.bin`` truncated in place while a dataset has it memory-mapped.

Every case runs in a subprocess: a SIGBUS there fails the test (with its signal), it
never kills pytest. Checked: reads of the mapping's tail re-check the size, a forked
DataLoader worker re-checks every mapped file when it starts, a spawned one reopens the
files (and fails on the size check at open), a file replaced by rename is harmless, and
``mmap=False`` is the safe mode. A read that none of these checks covers still dies of
SIGBUS, but names the file first: ``tests/format/test_sigbus.py``."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import numpy
import pytest

from tokenloom.format import IndexedDatasetBuilder

pytestmark = pytest.mark.processes
SEQUENCES, LENGTH = 64, 2000  # 256,000 bytes of uint16: far more than the guarded 64 KiB tail

PRELUDE = """
import logging, os, sys
import numpy
from tokenloom.errors import FormatError
from tokenloom.format import IndexedDataset
logging.basicConfig(level=logging.ERROR, stream=sys.stderr)
prefix = sys.argv[1]
bin_path = prefix + ".bin"
size = os.path.getsize(bin_path)
"""


@pytest.fixture
def prefix(tmp_path):
    path = str(tmp_path / "data")
    builder = IndexedDatasetBuilder(path + ".bin", dtype=numpy.uint16)
    for i in range(SEQUENCES):
        builder.add_item(numpy.full(LENGTH, i + 1, dtype=numpy.uint16))
        builder.end_document()
    builder.finalize(path + ".idx")
    return path


def _run(script: str, prefix: str, timeout: float = 120) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(script), prefix],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if done.returncode < 0:
        pytest.fail(
            f"the reader was killed by {signal.Signals(-done.returncode).name}: "
            f"{done.stderr[-2000:]}"
        )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


@pytest.mark.timeout(120)
def test_a_read_of_the_tail_after_truncation_is_an_error_naming_the_file(prefix):
    done = _run(
        """
        dataset = IndexedDataset(prefix)
        assert int(dataset[0][0]) == 1
        os.truncate(bin_path, size - 1000)  # cuts the last sequence, inside the last page
        try:
            print("served", int(numpy.asarray(dataset[len(dataset) - 1]).sum()))
        except FormatError as error:
            print("error:", error)
        try:
            dataset[0]  # once found shrunk, every read raises (no SIGBUS, no zeros)
            print("served first")
        except FormatError:
            print("first refused too")
    """,
        prefix,
    )
    assert f"error: {prefix}.bin: the data file shrank from 256000 to 255000 bytes" in done.stdout
    assert "mmap_bin_files=False" in done.stdout and "first refused too" in done.stdout


@pytest.mark.timeout(180)
@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_a_dataloader_worker_started_after_truncation_raises_instead_of_sigbus(prefix, context):
    done = _run(
        f"""
        import torch.utils.data
        dataset = IndexedDataset(prefix)
        os.truncate(bin_path, size // 2)  # the middle is cut: not a tail read
        loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=1,
                                             sampler=[40],  # not in the guarded tail
                                             multiprocessing_context="{context}")
        try:
            print("served", [int(numpy.asarray(b).sum()) for b in loader])
        except (FormatError, RuntimeError) as error:  # spawn: torch loses the worker's error
            print("error:", error)
    """.replace("SEQUENCES", str(SEQUENCES)),
        prefix,
    )
    assert "error: " in done.stdout and "served" not in done.stdout, done.stdout + done.stderr
    if context == "fork":  # the worker's re-check at start, also logged there
        assert f"{prefix}.bin: the data file shrank from 256000 to 128000 bytes" in done.stdout
        assert f"{prefix}.bin: the data file shrank" in done.stderr
    else:  # the spawned worker reopens the pair: the size check at open, in its stderr
        assert f"FormatError: {prefix}.bin: data file is 128000 bytes" in done.stderr


@pytest.mark.timeout(120)
def test_a_file_replaced_by_rename_keeps_the_mapping_readable(prefix):
    done = _run(
        """
        dataset = IndexedDataset(prefix)
        with open(bin_path + ".new", "wb") as handle:
            handle.write(b"\\0" * 10)
        os.replace(bin_path + ".new", bin_path)  # a new inode: the mapped one lives on
        pid = os.fork()
        if pid == 0:
            os._exit(0 if int(dataset[63][0]) == 64 else 3)
        assert os.waitpid(pid, 0)[1] == 0
        print("served", int(dataset[len(dataset) - 1][0]))
    """,
        prefix,
    )
    assert "served 64" in done.stdout and "shrank" not in done.stderr


@pytest.mark.timeout(120)
def test_mmap_false_is_the_safe_mode(prefix):
    done = _run(
        """
        dataset = IndexedDataset(prefix, mmap=False)
        os.truncate(bin_path, 1000)
        for i in (1, len(dataset) - 1):
            try:
                dataset[i]
                print("served", i)
            except FormatError as error:
                print("error:", error)
    """,
        prefix,
    )
    assert done.stdout.count(f"error: {prefix}.bin") == 2, done.stdout

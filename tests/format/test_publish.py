"""A finished publish leaves nothing but the pair and its sidecar (so Megatron's own
``tools/merge_datasets.py`` accepts the folder), and the publish locks hold while files
come and go: a waiter on a deleted lock file locks the new one, and a reader keeps a
writer away whether or not the prefix has an ``.idx`` yet."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy
import pytest
from tests.support.megatron_core import require_megatron, run_json
from tests.support.tmpfs import mounted_tmpfs

from tokenloom.errors import FormatError
from tokenloom.format import IndexedDataset, IndexedDatasetBuilder, publish
from tokenloom.format.publish_locks import Deadline, acquire, release


def _write(prefix: str, documents, sidecar: bytes = b'{"gen": 1}', lock_timeout=None) -> str:
    builder = IndexedDatasetBuilder(f"{prefix}.bin", dtype=numpy.uint16)
    for document in documents:
        builder.add_item(document)
        builder.end_document()
    builder.finalize(f"{prefix}.idx", extra_files={".json": sidecar}, lock_timeout=lock_timeout)
    return prefix


def _documents(prefix: str) -> list:
    with IndexedDataset(prefix) as dataset:
        return [dataset[i].tolist() for i in range(len(dataset))]


def test_finalize_leaves_only_the_pair_and_its_sidecar(tmp_path):
    prefix = _write(str(tmp_path / "data"), [[1, 2], [3]])
    assert sorted(os.listdir(tmp_path)) == ["data.bin", "data.idx", "data.json"]
    _write(prefix, [[4, 5, 6]], b'{"gen": 2}')  # replacing the pair: still nothing else
    assert sorted(os.listdir(tmp_path)) == ["data.bin", "data.idx", "data.json"]
    assert _documents(prefix) == [[4, 5, 6]]
    assert sorted(os.listdir(tmp_path)) == ["data.bin", "data.idx", "data.json"]


def _preprocess(tmp_path: Path) -> Path:
    from tokenloom.preprocess import preprocess

    (tmp_path / "in.jsonl").write_text(
        "".join(f'{{"text": "doc {i}", "title": "t{i}"}}\n' for i in range(20))
    )
    out = tmp_path / "out"
    preprocess(
        str(tmp_path / "in.jsonl"),
        str(out / "web"),
        "bytes",
        json_keys=("text", "title"),
        show_progress=False,
    )
    return out


PREPROCESSED = [
    f"web_{key}_document{ext}" for key in ("text", "title") for ext in (".bin", ".idx", ".json")
]


def test_preprocess_and_merge_leave_only_their_outputs(tmp_path):
    from tokenloom.cli.main import main
    from tokenloom.preprocess.ray_engine.merge import merge_shards

    out = _preprocess(tmp_path)
    assert sorted(os.listdir(out)) == PREPROCESSED
    inputs = [str(out / "web_text_document"), str(out / "web_title_document")]
    (tmp_path / "merged").mkdir()
    assert (
        main(["merge", "--no-progress", "--output-prefix", str(tmp_path / "merged/m"), *inputs])
        == 0
    )
    assert sorted(os.listdir(tmp_path / "merged")) == ["m.bin", "m.idx", "m.json"]
    (tmp_path / "ray").mkdir()  # the Ray engine's final step, on the same shards
    merge_shards(inputs, str(tmp_path / "ray" / "r"))
    assert sorted(os.listdir(tmp_path / "ray")) == ["r.bin", "r.idx", "r.json"]
    assert sorted(os.listdir(out)) == PREPROCESSED  # reading the inputs left no trace


# What megatron-core 0.16.1's tools/merge_datasets.py main() does with --input FOLDER:
# every file of the folder must have its .bin/.idx partner (else it stops with
# "ERROR: .idx file not provided ..."), then the pairs are merged in sorted order with
# megatron-core's own IndexedDataset and IndexedDatasetBuilder.add_index.
_MEGATRON_MERGE_FOLDER = r"""
import json, os, sys
from megatron.core.datasets.indexed_dataset import (
    IndexedDataset, IndexedDatasetBuilder, get_bin_path, get_idx_path)

folder, output = sys.argv[1], sys.argv[2]
prefixes = set()
for name in os.listdir(folder):
    prefix, ext = os.path.splitext(name)
    if prefix in prefixes or not os.path.isfile(os.path.join(folder, name)):
        continue
    partner = ".bin" if ext == ".idx" else ".idx"
    if not os.path.isfile(os.path.join(folder, prefix) + partner):
        print(json.dumps({"error": f"{partner} file not provided for {prefix}"}))
        sys.exit(0)
    prefixes.add(prefix)
builder = None
for prefix in sorted(prefixes):
    if builder is None:
        dtype = IndexedDataset(os.path.join(folder, prefix)).index.dtype
        builder = IndexedDatasetBuilder(get_bin_path(output), dtype=dtype)
    builder.add_index(os.path.join(folder, prefix))
builder.finalize(get_idx_path(output))
print(json.dumps({"merged": sorted(prefixes)}))
"""


@pytest.mark.timeout(300)
@pytest.mark.megatron
def test_megatron_merge_datasets_accepts_a_preprocessed_folder(tmp_path):
    require_megatron()
    from tokenloom.cli.main import main

    out = _preprocess(tmp_path)
    answer = run_json(_MEGATRON_MERGE_FOLDER, str(out), str(tmp_path / "megatron"))
    assert answer == {"merged": ["web_text_document", "web_title_document"]}
    inputs = [str(out / "web_text_document"), str(out / "web_title_document")]
    assert main(["merge", "--no-progress", "--output-prefix", str(tmp_path / "ours"), *inputs]) == 0
    for ext in (".bin", ".idx"):  # megatron-core's merge of the folder == tokenloom's
        assert (tmp_path / f"megatron{ext}").read_bytes() == (tmp_path / f"ours{ext}").read_bytes()


def test_a_waiter_on_a_deleted_lock_file_locks_the_new_one(tmp_path):
    path = str(tmp_path / publish.LOCK_NAME)
    first = acquire(path, True, Deadline(5), create=True)
    assert first is not None
    got: list = []
    waiter = threading.Thread(
        target=lambda: got.append(acquire(path, True, Deadline(10), create=True))
    )
    waiter.start()
    waiter.join(0.2)
    assert waiter.is_alive()  # blocked behind the first holder, on the same inode
    release(first, path)  # the last holder deletes the file, then unlocks
    waiter.join(10)
    (second,) = got
    assert second is not None  # it holds the new file, not the dead inode:
    assert os.fstat(second).st_ino == os.stat(path).st_ino
    release(second, path)
    assert os.listdir(tmp_path) == []


def _writer_in_child(prefix: str, documents, timeout: float) -> int:
    """Exit code of a child process writing ``prefix``: 0, or 3 on PublishTimeoutError."""
    script = (
        "import sys, numpy\n"
        "from tokenloom.errors import PublishTimeoutError\n"
        "from tokenloom.format import IndexedDatasetBuilder\n"
        "b = IndexedDatasetBuilder(sys.argv[1] + '.bin', dtype=numpy.uint16)\n"
        f"for d in {documents!r}:\n"
        "    b.add_item(d); b.end_document()\n"
        "try:\n"
        f"    b.finalize(sys.argv[1] + '.idx', lock_timeout={timeout})\n"
        "except PublishTimeoutError as e:\n"
        "    print(e); sys.exit(3)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, prefix], capture_output=True, text=True, timeout=60
    )
    assert done.returncode in (0, 3), done.stderr
    return done.returncode


@pytest.mark.timeout(60)
@pytest.mark.processes
def test_a_reader_keeps_a_writer_away_from_an_existing_pair(tmp_path):
    prefix = _write(str(tmp_path / "data"), [[1, 2]])
    with publish.reading(prefix):  # what IndexedDataset does while it opens both files
        assert _writer_in_child(prefix, [[7]], timeout=0.3) == 3
    assert _documents(prefix) == [[1, 2]]
    assert _writer_in_child(prefix, [[7]], timeout=5) == 0
    assert _documents(prefix) == [[7]]


@pytest.mark.timeout(60)
@pytest.mark.processes
def test_a_reader_keeps_a_writer_away_from_a_prefix_without_an_index(tmp_path):
    prefix = str(tmp_path / "data")  # nothing there yet: no .idx, no lock file
    with publish.reading(prefix):
        assert _writer_in_child(prefix, [[7]], timeout=0.3) == 3
        assert os.listdir(tmp_path) == []  # the refused writer discarded its temporaries
    assert _writer_in_child(prefix, [[7]], timeout=5) == 0
    assert _documents(prefix) == [[7]]


def _remount(folder: Path, mode: str) -> None:
    done = subprocess.run(["mount", "-o", f"remount,{mode}", str(folder)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot remount a tmpfs {mode}: {done.stderr.decode().strip()}")


def _crash_after_the_commit(prefix: str, documents) -> None:
    """A writer SIGKILLed right after writing its journal (before any rename)."""
    pid = os.fork()
    if pid == 0:  # the child: die at the first rename of the publish
        real = os.replace

        def replace(source, target):
            if os.path.basename(source).startswith(".data.bin."):
                os.kill(os.getpid(), 9)
            real(source, target)

        os.replace = replace
        try:
            _write(prefix, documents, b'{"gen": 2}')
        finally:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == -9


@pytest.mark.timeout(60)
@pytest.mark.processes
def test_read_only_folder_reads_without_trace_and_asks_for_write_access_to_repair(tmp_path):
    with mounted_tmpfs(tmp_path / "ro", "4m") as folder:
        prefix = _write(str(folder / "data"), [[1, 2]])
        _remount(folder, "ro")
        assert _documents(prefix) == [[1, 2]]  # readers lock through read-only descriptors
        assert sorted(os.listdir(folder)) == ["data.bin", "data.idx", "data.json"]
        _remount(folder, "rw")
        _crash_after_the_commit(prefix, [[9, 9, 9]])
        assert os.path.exists(publish.journal_path(prefix))
        _remount(folder, "ro")
        with pytest.raises(FormatError, match="open the dataset once with write access"):
            IndexedDataset(prefix)
        _remount(folder, "rw")
        assert _documents(prefix) == [[9, 9, 9]]  # rolled forward by the first writable open
        assert sorted(os.listdir(folder)) == ["data.bin", "data.idx", "data.json"]

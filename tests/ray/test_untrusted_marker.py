"""A crafted shard marker (issue 18, classes 5 and 6) is no marker: the shard runs again.
Nested 100,000 levels deep, a FIFO or a sparse 1 TiB file, it is never a RecursionError,
a hang or an unbounded read (no Ray needed)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy
import pytest
from tests.support.untrusted_files import plant, run_bounded

from tokenloom.format import IndexedDatasetBuilder
from tokenloom.preprocess.ray_engine.markers import marker_path, reusable_marker, write_marker
from tokenloom.preprocess.ray_engine.plan import plan_shards

pytestmark = pytest.mark.timeout(60)


def _marked_shard(tmp_path: Path):
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps({"text": "x" * i}) + "\n" for i in range(20)))
    shard = plan_shards([str(source)], 1)[0]
    workdir = tmp_path / "work"
    workdir.mkdir()
    prefix = str(workdir / f"{shard.name}_text_document")
    builder = IndexedDatasetBuilder(f"{prefix}.bin", dtype=numpy.uint16)
    builder.add_item(numpy.array([1, 2, 3], dtype=numpy.uint16))
    builder.end_document()
    builder.finalize(f"{prefix}.idx")
    counts = {"outputs": {"text": {"documents": 1, "tokens": 3}}}
    write_marker(str(workdir), shard, "S", {"text": prefix}, counts)
    return shard, str(workdir)


@pytest.mark.parametrize("kind", ["deep", "deep_closed", "fifo", "huge"])
def test_crafted_marker_means_run_again(tmp_path, kind):
    shard, workdir = _marked_shard(tmp_path)
    assert reusable_marker(workdir, shard, "S", ["text"]) is not None
    path = marker_path(workdir, shard)
    if kind == "fifo":
        os.unlink(path)
        os.mkfifo(path)
    else:
        plant(path, kind)
    assert reusable_marker(workdir, shard, "S", ["text"]) is None


@pytest.mark.processes
def test_marker_symlinked_to_dev_zero_is_not_read(tmp_path):
    shard, workdir = _marked_shard(tmp_path)
    plant(marker_path(workdir, shard), "zero")
    code = (
        "import sys; from tokenloom.preprocess.ray_engine.markers import reusable_marker; "
        "from tokenloom.preprocess.ray_engine.plan import plan_shards; "
        "shard = plan_shards([sys.argv[1]], 1)[0]; "
        "print(reusable_marker(sys.argv[2], shard, 'S', ['text']))"
    )
    done = run_bounded(["-c", code, str(tmp_path / "in.jsonl"), workdir], tmp_path)
    assert done.returncode == 0 and done.stdout.strip() == "None", done.stderr[-3000:]

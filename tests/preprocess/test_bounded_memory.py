"""Peak memory of a preprocess run does not grow with the input (issue 22 §4).

Each run is a fresh process that reports its own peak resident set (``VmHWM``) after
``preprocess`` on 0.25M or 1M tiny documents with the byte tokenizer.  Before the index
was spooled, the builder held 12 bytes a document and the ``.idx`` write 24 more (the
pointers and their temporaries): the larger run peaked ~27 MB above the smaller one,
with ``--partitions`` too (the merge mapped and copied every part's index).  Now the
difference is noise.  benchmarks/bench_preprocess_memory.py measures it at GB scale.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.processes, pytest.mark.slow]

_CHILD = """
import sys
from tokenloom.preprocess import preprocess
preprocess(
    [sys.argv[1]], sys.argv[2], "bytes", partitions=int(sys.argv[3]), show_progress=False,
    chunk_bytes=1 << 18,  # the same chunks in both runs (a small input gets smaller ones)
)
with open("/proc/self/status") as status:
    print(next(int(l.split()[1]) for l in status if l.startswith("VmHWM:")))
"""


def _peak_kb(tmp_path, documents: int, partitions: int) -> int:
    source = tmp_path / f"in-{documents}.jsonl"
    with open(source, "wb") as handle:
        handle.write(b'{"text": "ab"}\n' * documents)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            _CHILD,
            str(source),
            str(tmp_path / f"out-{documents}"),
            str(partitions),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=True,
    )
    source.unlink()
    return int(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs Linux /proc")
@pytest.mark.parametrize("partitions", [1, 2])
def test_peak_memory_does_not_grow_with_the_documents(tmp_path, partitions):
    small = _peak_kb(tmp_path, 250_000, partitions)
    large = _peak_kb(tmp_path, 1_000_000, partitions)
    growth_mb = (large - small) / 1024
    assert growth_mb < 8, f"peak grew {growth_mb:.1f} MB from 0.25M to 1M documents"

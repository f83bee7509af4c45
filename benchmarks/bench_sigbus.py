"""What tokenloom's SIGBUS handler (``tokenloom.format.sigbus``) costs.

    .venv/bin/python benchmarks/bench_sigbus.py [--repeats 5] [--opens 2000] [--reads 200000]

Each number is the minimum over ``--repeats`` fresh processes (noise only adds time),
with the handler on (the default) and off (``TOKENLOOM_SIGBUS_HANDLER=0``); ``install``
is wall time, the others CPU time of the process per operation:

* ``install``: ``install()`` once per process (compile the handler, install it), in a
  process that has not loaded numba (llvmlite's import included: what a bare
  ``IndexedDataset`` user pays, in the kernel loader's background thread) and in one
  that already ran a numba kernel (what a ``GPTDataset`` user pays on top);
* ``open+close``: one ``IndexedDataset(prefix)`` opened and closed (two mappings
  recorded and dropped, plus one ``sigaction`` check per mapping);
* ``record+drop``: ``REPORTER.register`` + ``unregister`` of one mapping alone (what
  each of those two mappings adds to an open and a close);
* ``read``: one ``dataset[i]`` of a random sequence, copied (nothing is added on the
  read path: the two columns should agree within noise).

Prints one JSON line per measurement and a summary table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy

CHILD = """
import json, os, sys, time
import numpy
spec = json.loads(sys.argv[1])
out = {}
from tokenloom.format import IndexedDataset
from tokenloom.format.sigbus import REPORTER
from tokenloom.kernels import KERNELS
KERNELS.stop()  # every load in this thread: nothing in the background during the clock
if spec["warm"]:  # a kernel ran: numba is imported and started
    scan = KERNELS.require("blend_scan")
    scan.blend_scan(numpy.full(4, 0.25), numpy.empty(8, "i2"), numpy.empty(8, "i8"))
t = time.perf_counter()
out["installed"] = REPORTER.install()
out["install_s"] = time.perf_counter() - t
prefix, opens, reads = spec["prefix"], spec["opens"], spec["reads"]
IndexedDataset(prefix).close()
t = time.process_time()  # CPU time: the loops below are this thread's work alone
for _ in range(opens):
    IndexedDataset(prefix).close()
out["open_close_us"] = (time.process_time() - t) / opens * 1e6
t = time.process_time()
for i in range(opens):
    REPORTER.unregister(*REPORTER.register((1 << 40) + i * 8192, 4096, prefix + ".bin"))
out["record_us"] = (time.process_time() - t) / opens * 1e6
dataset = IndexedDataset(prefix)
order = numpy.random.default_rng(0).integers(0, len(dataset), reads).tolist()
t = time.process_time()
for i in order:
    numpy.array(dataset[i])
out["read_us"] = (time.process_time() - t) / reads * 1e6
out["recorded"] = len(REPORTER)
print(json.dumps(out))
"""


def _corpus(folder: str) -> str:
    from tokenloom.format import IndexedDatasetBuilder

    prefix = os.path.join(folder, "bench")
    builder = IndexedDatasetBuilder(prefix + ".bin", dtype=numpy.uint16)
    rng = numpy.random.default_rng(0)
    for _ in range(20000):
        builder.add_item(rng.integers(0, 32000, int(rng.integers(16, 512))))
        builder.end_document()
    builder.finalize(prefix + ".idx")
    return prefix


def _run(spec: dict, handler: bool) -> dict:
    env = dict(os.environ, TOKENLOOM_SIGBUS_HANDLER="1" if handler else "0")
    env.pop("TOKENLOOM_DISABLE_NUMBA", None)
    done = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(spec)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--opens", type=int, default=2000)
    parser.add_argument("--reads", type=int, default=200000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tokenloom-bench-sigbus-") as folder:
        prefix = _corpus(folder)
        best: dict[tuple[bool, bool], dict] = {}
        for repeat in range(args.repeats):
            for warm in (False, True):
                for handler in (True, False):
                    spec = dict(prefix=prefix, opens=args.opens, reads=args.reads, warm=warm)
                    row = _run(spec, handler)
                    print(json.dumps(dict(repeat=repeat, warm=warm, handler=handler, **row)))
                    old = best.setdefault((warm, handler), row)
                    for key in ("install_s", "open_close_us", "record_us", "read_us"):
                        old[key] = min(old[key], row[key])
    print(
        f"\n{'numba loaded before':<20} {'handler':<8} {'install':>10} {'open+close':>12} "
        f"{'record+drop':>12} {'read':>9}"
    )
    for (warm, handler), row in sorted(best.items()):
        install = f"{row['install_s'] * 1e3:.1f} ms" if row["installed"] else "-"
        print(
            f"{'yes' if warm else 'no':<20} {'on' if handler else 'off':<8} {install:>10} "
            f"{row['open_close_us']:>9.1f} us {row['record_us']:>9.2f} us {row['read_us']:>6.2f} us"
        )


if __name__ == "__main__":
    main()

"""Time to the first sample of a fresh process, by state of numba's on-disk cache.

    .venv/bin/python benchmarks/bench_first_sample.py [--prefixes 64] [--repeats 3]
        [--src PATH ...]

A weighted blend of ``--prefixes`` small corpora (``BlendedMegatronDatasetBuilder``,
``--size`` training samples, so that the blending, sample-index and shuffle kernels
all run), built from an empty index cache, then ``train[0]``. Each measurement is a
whole fresh process (interpreter start, imports, build, first sample), timed from
outside, with ``NUMBA_CACHE_DIR`` pointing at:

* ``fresh``: an empty folder (the first process on a fresh install);
* ``warmup``: a folder filled by ``tokenloom warmup`` (the first process after it);
* ``warm``: a folder filled by an earlier run of the same workload.

``--src`` runs the same for other source trees (e.g. an older checkout's ``src``) to
compare. Prints one JSON line per measurement and a summary table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy

CHILD = """
import json, sys, time
t0 = time.perf_counter()
from tokenloom.builder import BlendedMegatronDatasetBuilder
from tokenloom.datasets import GPTDataset, GPTDatasetConfig
t1 = time.perf_counter()
spec = json.loads(sys.argv[1])
config = GPTDatasetConfig(random_seed=1234, sequence_length=spec["seq"],
    blend=(spec["prefixes"], spec["weights"]), split="100,0,0",
    path_to_cache=spec["cache"], tokenizer={"vocab_size": 32000, "eod": 2},
    reset_position_ids=False, reset_attention_mask=False, eod_mask_loss=False,
    create_attention_mask=False)
train = BlendedMegatronDatasetBuilder(GPTDataset, [spec["size"], 0, 0], lambda: True,
                                      config).build()[0]
t2 = time.perf_counter()
first = train[0]
t3 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "build_s": t2 - t1, "first_sample_s": t3 - t2,
                  "tokens_sum": int(first["tokens"].sum())}))
"""


def _corpora(folder: str, count: int, src: str) -> list[str]:
    code = (
        "import sys, numpy\nfrom tokenloom.format import IndexedDatasetBuilder\n"
        "folder, count = sys.argv[1], int(sys.argv[2])\n"
        "for p in range(count):\n"
        "    rng = numpy.random.default_rng(p)\n"
        "    b = IndexedDatasetBuilder(f'{folder}/c{p}.bin', dtype=numpy.uint16)\n"
        "    for n in rng.integers(20, 400, 300):\n"
        "        t = rng.integers(3, 32000, n); t[-1] = 2\n"
        "        b.add_item(t); b.end_document()\n"
        "    b.finalize(f'{folder}/c{p}.idx')\n"
    )
    subprocess.run(
        [sys.executable, "-c", code, folder, str(count)],
        check=True,
        env=dict(os.environ, PYTHONPATH=src),
    )
    return [os.path.join(folder, f"c{p}") for p in range(count)]


def _measure(src: str, numba_dir: str, spec: dict, work: str) -> dict:
    cache = tempfile.mkdtemp(dir=work, prefix="index-cache-")
    env = dict(os.environ, PYTHONPATH=src, NUMBA_CACHE_DIR=numba_dir)
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(dict(spec, cache=cache))],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["process_s"] = time.perf_counter() - start
    shutil.rmtree(cache)
    return result


def _warmup(src: str, numba_dir: str) -> float:
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "tokenloom", "warmup", "--quiet"],
        check=True,
        env=dict(os.environ, PYTHONPATH=src, NUMBA_CACHE_DIR=numba_dir),
    )
    return time.perf_counter() - start


def _run_tree(src: str, spec: dict, work: str, repeats: int) -> list[dict]:
    rows = []
    has_warmup = os.path.exists(os.path.join(src, "tokenloom", "cli", "warmup.py"))
    for r in range(repeats):
        before = len(rows)
        fresh = tempfile.mkdtemp(dir=work, prefix="numba-")
        rows.append(dict(_measure(src, fresh, spec, work), src=src, mode="fresh", run=r))
        rows.append(dict(_measure(src, fresh, spec, work), src=src, mode="warm", run=r))
        if has_warmup:
            warmed = tempfile.mkdtemp(dir=work, prefix="numba-")
            seconds = _warmup(src, warmed)
            rows.append(
                dict(
                    _measure(src, warmed, spec, work),
                    src=src,
                    mode="warmup",
                    run=r,
                    warmup_s=seconds,
                )
            )
        for row in rows[before:]:
            print(json.dumps(row), flush=True)
    return rows


def main() -> None:
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--prefixes", type=int, default=64)
    parser.add_argument("--size", type=int, default=500_000)
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--src", nargs="*", default=[os.path.join(here, "src")])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="first-sample-") as work:
        prefixes = _corpora(work, args.prefixes, args.src[0])
        weights = (numpy.random.default_rng(0).random(args.prefixes) + 0.5).tolist()
        spec = dict(prefixes=prefixes, weights=weights, size=args.size, seq=args.seq)
        rows = [row for src in args.src for row in _run_tree(src, spec, work, args.repeats)]
    print(f"\n{'src':<40} {'mode':<7} {'process s':>16} {'build s':>14} {'first sample s':>16}")
    for src in args.src:
        for mode in ("fresh", "warmup", "warm"):
            picked = [r for r in rows if r["src"] == src and r["mode"] == mode]
            if picked:
                cells = [
                    f"{min(r[k] for r in picked):.2f}-{max(r[k] for r in picked):.2f}"
                    for k in ("process_s", "build_s", "first_sample_s")
                ]
                print(f"{src[-40:]:<40} {mode:<7} {cells[0]:>16} {cells[1]:>14} {cells[2]:>16}")


if __name__ == "__main__":
    main()

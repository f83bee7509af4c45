"""Command to exit of short tokenloom processes, by state of numba's on-disk cache.

    .venv/bin/python benchmarks/startup_exit.py [--repeats 3] [--src PATH ...] [--pair PREFIX]

Three short commands, each a whole fresh process timed from outside (wall clock, from
the command to the process's exit):

* ``help``: ``tokenloom --help``;
* ``inspect``: ``tokenloom inspect PREFIX`` (a golden pair of
  ``../shared/golden/megatron-core-0.16.1/format/`` by default, else a small generated
  one);
* ``10 samples``: a script that builds a ``GPTDataset`` over that pair through
  ``BlendedMegatronDatasetBuilder`` (an empty index cache each run) and reads samples
  0-9. It also reports when its work was done, so ``exit wait`` is the time between the
  last sample and the process's end.

with ``NUMBA_CACHE_DIR`` pointing at:

* ``fresh``: an empty folder for every run (the first process on a fresh install);
* ``warm``: a folder filled by an earlier, unmeasured run of the same command;
* ``no numba``: ``TOKENLOOM_DISABLE_NUMBA=1`` (the reference kernels; for comparison).

``--src`` measures other source trees too (e.g. ``git archive HEAD~1 src | tar -x -C
/tmp/old`` and ``--src src /tmp/old/src``). Prints one JSON line per run, then a table of
the best (and worst) of ``--repeats`` runs.
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

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
GOLDEN = os.path.join(
    os.path.dirname(ROOT), "shared", "golden", "megatron-core-0.16.1", "format", "u16_single"
)

SAMPLES = """
import json, sys, time
from tokenloom.builder import BlendedMegatronDatasetBuilder
from tokenloom.datasets import GPTDataset, GPTDatasetConfig
prefix, cache = sys.argv[1], sys.argv[2]
config = GPTDatasetConfig(random_seed=1234, sequence_length=64, blend=([prefix], None),
    split="100,0,0", path_to_cache=cache, tokenizer={"vocab_size": 65536, "eod": 0},
    reset_position_ids=False, reset_attention_mask=False, eod_mask_loss=False,
    create_attention_mask=False)
train = BlendedMegatronDatasetBuilder(GPTDataset, [10, 0, 0], lambda: True, config).build()[0]
total = sum(int(train[i]["tokens"].sum()) for i in range(10))
print(json.dumps({"done": time.time(), "tokens_sum": total}), flush=True)
"""

MAKE_PAIR = """
import sys, numpy
from tokenloom.format import IndexedDatasetBuilder
rng = numpy.random.default_rng(0)
builder = IndexedDatasetBuilder(sys.argv[1] + ".bin", dtype=numpy.uint16)
for n in rng.integers(5, 500, 40):
    builder.add_item(rng.integers(1, 65535, n)); builder.end_document()
builder.finalize(sys.argv[1] + ".idx")
"""

COMMANDS = ("help", "inspect", "10 samples")
MODES = ("fresh", "warm", "no numba")


def _argv(command: str, prefix: str, work: str) -> list[str]:
    if command == "help":
        return [sys.executable, "-m", "tokenloom", "--help"]
    if command == "inspect":
        return [sys.executable, "-m", "tokenloom", "inspect", prefix]
    cache = tempfile.mkdtemp(dir=work, prefix="index-cache-")
    return [sys.executable, "-c", SAMPLES, prefix, cache]


def _env(src: str, mode: str, numba_dir: str) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=src, NUMBA_CACHE_DIR=numba_dir)
    env.pop("TOKENLOOM_DISABLE_NUMBA", None)
    if mode == "no numba":
        env["TOKENLOOM_DISABLE_NUMBA"] = "1"
    return env


def _run(argv: list[str], env: dict[str, str]) -> dict[str, float]:
    start = time.time()
    done = subprocess.run(argv, env=env, capture_output=True, text=True)
    end = time.time()
    if done.returncode != 0:
        raise RuntimeError(f"{argv[1:3]} exited {done.returncode}: {done.stderr[-2000:]}")
    row = {"exit_s": end - start}
    lines = done.stdout.strip().splitlines()
    if lines and lines[-1].startswith('{"done"'):
        row["exit_wait_s"] = end - json.loads(lines[-1])["done"]
    return row


def measure(src: str, command: str, mode: str, prefix: str, work: str) -> dict[str, float]:
    """One measured run of ``command`` (a fresh process) in ``mode``."""
    numba_dir = tempfile.mkdtemp(dir=work, prefix="numba-")
    if mode == "warm":
        _run(_argv(command, prefix, work), _env(src, mode, numba_dir))
    return _run(_argv(command, prefix, work), _env(src, mode, numba_dir))


def _cell(rows: list[dict], key: str) -> str:
    values = [row[key] for row in rows if key in row]
    if not values:
        return "-"
    return f"{min(values):.2f} ({max(values):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--src", nargs="*", default=[os.path.join(ROOT, "src")])
    parser.add_argument("--pair", default=GOLDEN, help="prefix of the pair to inspect and read")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="startup-exit-") as work:
        prefix = args.pair
        if not os.path.exists(prefix + ".idx"):
            prefix = os.path.join(work, "pair")
            subprocess.run(
                [sys.executable, "-c", MAKE_PAIR, prefix],
                check=True,
                env=_env(args.src[0], "no numba", work),
            )
        for src in args.src:  # byte-compile the tree first: a fresh install is compiled
            subprocess.run([sys.executable, "-m", "compileall", "-q", src], check=True)
        for repeat in range(args.repeats):
            for src in args.src:
                for command in COMMANDS:
                    for mode in MODES:
                        row = measure(src, command, mode, prefix, work)
                        row.update(src=src, command=command, mode=mode, run=repeat)
                        print(json.dumps(row), flush=True)
                        rows.append(row)
                        for leftover in os.listdir(work):
                            if leftover.startswith(("numba-", "index-cache-")):
                                shutil.rmtree(os.path.join(work, leftover))
    print("\nbest (worst) of", args.repeats, "runs, seconds from command to exit")
    print(f"{'src':<32} {'command':<11} {'mode':<9} {'exit':>13} {'exit wait':>13}")
    for src in args.src:
        for command in COMMANDS:
            for mode in MODES:
                picked = [
                    r for r in rows if (r["src"], r["command"], r["mode"]) == (src, command, mode)
                ]
                print(
                    f"{src[-32:]:<32} {command:<11} {mode:<9} {_cell(picked, 'exit_s'):>13} "
                    f"{_cell(picked, 'exit_wait_s'):>13}"
                )


if __name__ == "__main__":
    main()

"""Peak memory of ``tokenloom preprocess`` against the input size (issue 22 §4).

    .venv/bin/python benchmarks/bench_preprocess_memory.py --sizes-gb 1,4,16 \\
        [--configs w1,w2,p2] [--tokenizer bytes] [--plot benchmarks/plots/preprocess_rss.png]

For each size the script writes a synthetic JSONL file (``{"text": ...}`` records of
pseudo-words drawn from a fixed vocabulary, lognormal document lengths of mean ~1 KB, so
that the number of documents grows with the size: 10⁶ documents a GB), runs the
``tokenloom preprocess`` command on it once per configuration (``w1``: one worker,
``w2``: two worker processes, ``p2``: one worker with ``--partitions 2``), deletes
each output as soon as it is measured, and the input once its size is done.

Memory is that of the whole process tree (the command, the fork server and its
workers), polled every 20 ms from ``/proc`` with psutil: ``tree_peak_mb`` is the
largest sum of the resident sets seen at one poll (shared pages counted once per
process, so an upper bound of what the tree used); ``hwm_sum_mb`` adds every process's
own high-water mark (``VmHWM``, exact per process, read at each poll), which bounds the
tree from above even between polls; ``parent_hwm_mb`` is the command's own.
(``ru_maxrss`` from ``wait4`` is not used: it counts the pages the child shared with
this script between ``fork`` and ``exec``.)  "Flat" means the peak does not grow with the size.

``--src DIR`` runs another checkout's ``src`` (e.g. the code before a change).  The
disk needed is about 3x the largest size (input + ``.bin`` of 2 bytes a byte with the
byte tokenizer), 5x with ``p2`` (the partitions, then their concatenation).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = {"w1": ["--workers", "1"], "w2": ["--workers", "2"], "p2": ["--partitions", "2"]}
_POOL_BYTES = 32 << 20
_POLL_S = 0.02


def _pool(seed: int = 0) -> bytes:
    """~32 MB of JSONL: documents of pseudo-words, lognormal lengths (mean ~1 KB)."""
    rng = numpy.random.default_rng(seed)
    letters = numpy.frombuffer(b"abcdefghijklmnopqrstuvwxyz", dtype=numpy.uint8)
    words = [
        bytes(rng.choice(letters, size=int(n)).tolist()).decode()
        for n in rng.integers(2, 11, size=5000)
    ]
    lines, size = [], 0
    while size < _POOL_BYTES:
        count = max(int(rng.lognormal(4.6, 0.9)), 1)  # words; ~6.5 bytes each
        text = " ".join(words[i] for i in rng.integers(0, len(words), size=count))
        line = json.dumps({"text": text}).encode() + b"\n"
        lines.append(line)
        size += len(line)
    return b"".join(lines)


def write_input(path: Path, nbytes: int) -> int:
    """Write ``nbytes`` (rounded down to whole lines of the pool) of JSONL; the lines."""
    pool = _pool()
    lines, left = pool.count(b"\n"), nbytes
    with open(path, "wb") as handle:
        written = 0
        while left >= len(pool):
            handle.write(pool)
            left, written = left - len(pool), written + lines
        if left:
            tail = pool[: pool.rfind(b"\n", 0, left) + 1]
            handle.write(tail)
            written += tail.count(b"\n")
    return written


def _hwm_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def measure(command: list[str], env: dict[str, str]) -> dict[str, Any]:
    """Run ``command``, polling the memory of its process tree; the figures (MB)."""
    import psutil

    started = time.perf_counter()
    child = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    root = psutil.Process(child.pid)
    tree_peak, hwm, processes = 0, {}, set()
    status = None
    while status is None:
        try:
            tree = [root] + root.children(recursive=True)
        except psutil.NoSuchProcess:
            tree = []
        total = 0
        for process in tree:
            try:
                total += process.memory_info().rss
                hwm[process.pid] = max(hwm.get(process.pid, 0), _hwm_kb(process.pid) << 10)
                processes.add(process.pid)
            except psutil.NoSuchProcess:
                continue
        tree_peak = max(tree_peak, total)
        pid, code = os.waitpid(child.pid, os.WNOHANG)
        if pid:
            status = code
        else:
            time.sleep(_POLL_S)
    output = child.stdout.read().decode(errors="replace") if child.stdout else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{output[-3000:]}")
    mb = 1 << 20
    return {
        "wall_s": round(time.perf_counter() - started, 2),
        "tree_peak_mb": round(tree_peak / mb, 1),
        "hwm_sum_mb": round(sum(hwm.values()) / mb, 1),
        "parent_hwm_mb": round(hwm.get(child.pid, 0) / mb, 1),
        "processes": len(processes),
    }


def _command(args: argparse.Namespace, source: Path, prefix: Path, config: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "tokenloom",
        "preprocess",
        "--input",
        str(source),
        "--output-prefix",
        str(prefix),
        "--tokenizer",
        args.tokenizer,
        *CONFIGS[config],
    ]


def _remove_outputs(work: Path) -> None:
    for path in work.glob("out_*"):
        path.unlink()


def disk_needed(gb: float, configs: list[str], tokenizer: str) -> float:
    """Bytes of disk a size needs at its peak: the input, and the ``.bin`` (2 bytes a byte
    with the byte tokenizer, at most 1 with a BPE), twice over with ``p2``."""
    output = 2.0 if tokenizer == "bytes" else 1.0
    return gb * 1e9 * (1 + output * (2 if "p2" in configs else 1)) * 1.05


def run_size(args: argparse.Namespace, gb: float, configs: list[str], env: dict) -> list[dict]:
    """Every configuration on one input of ``gb`` GB (1e9 bytes); the rows (one row saying
    why, when the disk cannot hold the size)."""
    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    free, skipped = shutil.disk_usage(work).free, []
    while configs and free < disk_needed(gb, configs, args.tokenizer):
        dropped = ["p2"] if "p2" in configs else list(configs)
        needed = disk_needed(gb, configs, args.tokenizer)
        reason = f"needs {needed / 1e9:.0f} GB of disk, {free / 1e9:.0f} GB free"
        print(f"skipping {gb:g} GB {','.join(dropped)}: {reason}", flush=True)
        skipped.append(
            dict(input_gb=gb, config=",".join(dropped), skipped=reason, label=args.label)
        )
        configs = [c for c in configs if c not in dropped]
    if not configs:
        return skipped
    source = work / f"input-{gb:g}gb.jsonl"
    started = time.perf_counter()
    documents = write_input(source, int(gb * 1e9))
    generated = time.perf_counter() - started
    rows = []
    try:
        for config in configs:
            row = measure(_command(args, source, work / "out", config), env)
            row.update(
                config=config,
                input_gb=gb,
                input_bytes=source.stat().st_size,
                documents=documents,
                tokenizer=args.tokenizer,
                label=args.label,
                generate_s=round(generated, 1),
            )
            rows.append(row)
            print(json.dumps(row), flush=True)
            _remove_outputs(work)
    finally:
        _remove_outputs(work)
        source.unlink()
    return rows + skipped


def plot(rows: list[dict], path: str) -> None:
    """Peak tree RSS against the input size, one line per (label, tokenizer, config)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7, 5))
    series: dict[tuple, list[dict]] = {}
    for row in rows:
        if "skipped" in row:
            continue
        series.setdefault((row["label"], row["tokenizer"], row["config"]), []).append(row)
    names = {"w1": "1 worker", "w2": "2 workers", "p2": "--partitions 2"}
    for (label, tokenizer, config), points in sorted(series.items()):
        points.sort(key=lambda r: r["input_gb"])
        style = "-" if label == "tokenloom" else "--"
        label = {
            "before": "before the index spool",
            "merge-16mib": "16 MiB merge copy chunk",
        }.get(label, label)
        axis.plot(
            [p["input_gb"] for p in points],
            [p["tree_peak_mb"] for p in points],
            style,
            marker="o",
            label=f"{label}, {tokenizer.split(':')[0]}, {names.get(config, config)}",
        )
    axis.set_xscale("log", base=2)
    sizes = sorted({row["input_gb"] for row in rows if "skipped" not in row})
    axis.set_xticks(sizes, [f"{size:g}" for size in sizes])
    axis.minorticks_off()
    axis.set_xlabel("input size (GB of JSONL, ~10⁶ documents a GB)")
    axis.set_ylabel("peak RSS of the process tree (MB)")
    axis.set_ylim(bottom=0)
    axis.grid(True, alpha=0.3)
    axis.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2)
    axis.set_title("tokenloom preprocess: peak memory vs input size")
    figure.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes-gb", default="1,4,16")
    p.add_argument("--configs", default="w1,w2,p2", help=f"of {','.join(CONFIGS)}")
    p.add_argument("--p2-max-gb", type=float, default=None, help="skip p2 above this size")
    p.add_argument("--tokenizer", default="bytes")
    p.add_argument("--work-dir", default="/tmp/tokenloom-preprocess-memory")
    p.add_argument("--src", default=str(ROOT / "src"), help="the checkout's src to run")
    p.add_argument("--label", default="tokenloom")
    p.add_argument("--out", help="append the rows (JSON lines) to this file")
    p.add_argument("--plot", help="plot every row of --out (or of this run) to this PNG")
    p.add_argument("--plot-only", action="store_true", help="only plot the rows of --out")
    return p.parse_args(argv)


def main(argv=None) -> list[dict]:
    args = parse_args(argv)
    env = dict(os.environ, PYTHONPATH=args.src, TOKENIZERS_PARALLELISM="false")
    rows: list[dict] = []
    if not args.plot_only:
        for gb in [float(s) for s in args.sizes_gb.split(",") if s.strip()]:
            configs = [c for c in args.configs.split(",") if c.strip()]
            if args.p2_max_gb is not None and gb > args.p2_max_gb:
                configs = [c for c in configs if c != "p2"]
            new = run_size(args, gb, configs, env)
            rows.extend(new)
            if args.out:
                with open(args.out, "a") as handle:
                    handle.writelines(json.dumps(row) + "\n" for row in new)
    if args.plot:
        if args.out and os.path.exists(args.out):
            rows = [json.loads(line) for line in open(args.out) if line.strip()]
        plot(rows, args.plot)
    return rows


def _row(row: dict[str, Any]) -> dict[str, Any]:
    """One measured point as a row of the suite's table."""
    case = f"{row['input_gb']:g} GB, {row['config']}, {row['label']}"
    if "skipped" in row:
        return {"target": "6 scale preprocess memory", "case": case, "error": row["skipped"]}
    return {
        "target": "6 scale preprocess memory",
        "case": f"{case}, {row['tokenizer']} ({row['documents']:,} documents)",
        "megatron_display": "-",
        "tokenloom_display": (
            f"peak tree RSS {row['tree_peak_mb']:.0f} MB (sum of HWM "
            f"{row['hwm_sum_mb']:.0f} MB, {row['processes']} processes), {row['wall_s']:.0f} s"
        ),
        "ratio_display": "-",
        "tree_peak_mb": row["tree_peak_mb"],
    }


def run(ctx: dict[str, Any]) -> list[dict[str, Any]]:
    """The suite's entry (``benchmarks/run.py --only scale``, issue 22 §4): one row per
    size and configuration, and the plot ``benchmarks/plots/preprocess_rss.png`` (full runs)."""
    work = Path(ctx["work"]) / "preprocess-memory"
    out = work / "rows.jsonl"
    argv = ["--work-dir", str(work / "w"), "--out", str(out)]
    if ctx.get("quick"):
        argv += ["--sizes-gb", "0.02,0.08"]
    else:
        argv += os.environ.get("TOKENLOOM_PREPROCESS_MEMORY_ARGS", "--sizes-gb 1,4,16").split()
        argv += ["--plot", str(ROOT / "benchmarks" / "plots" / "preprocess_rss.png")]
    work.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    return [_row(row) for row in main(argv)]


if __name__ == "__main__":
    main()

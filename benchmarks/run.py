"""Run every benchmark, tokenloom and megatron-core side by side, in one go.

    bash benchmarks/setup.sh && .bench-venv/bin/python benchmarks/run.py [--quick]

Prints a table, writes ``benchmarks/results.json`` and regenerates the generated
part of ``BENCHMARKS.md`` (between its ``bench:generated`` markers). Each measured
side runs in its own process (see harness.py); generated corpora are kept under
``--data-dir`` and reused by later runs, so a rerun costs only the measurements.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import report  # noqa: E402

TARGETS = ("blending", "fetch", "warmstart", "index", "preprocess", "scale", "attribution")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="small sizes: a smoke run of every target in a few minutes",
    )
    p.add_argument(
        "--only", default=",".join(TARGETS), help=f"comma-separated subset of {','.join(TARGETS)}"
    )
    p.add_argument(
        "--data-dir",
        default="/tmp/tokenloom-bench/data",
        help="where generated corpora live (kept and reused between runs)",
    )
    p.add_argument(
        "--work-dir",
        default="/tmp/tokenloom-bench/work",
        help="scratch space: index caches, outputs compared between sides",
    )
    p.add_argument("--results", default=str(HERE / "results.json"))
    p.add_argument(
        "--markdown",
        default=str(ROOT / "BENCHMARKS.md"),
        help="file whose generated section is rewritten ('' to skip)",
    )
    p.add_argument("--no-profile", action="store_true", help="skip the cProfile runs")
    p.add_argument(
        "--no-megatron-at-scale",
        action="store_true",
        help="run megatron-core only at the smaller prefix count in target 3",
    )
    return p.parse_args(argv)


def machine() -> dict[str, Any]:
    """What the numbers were measured on, and how busy the machine was."""
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)),
    }
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
        mem = Path("/proc/meminfo").read_text().split("\n", 1)[0].split()[1]
        info["memory_gib"] = round(int(mem) / 2**20, 1)
    except OSError:
        pass
    for name in ("numpy", "torch", "numba", "megatron.core", "tokenloom"):
        info[name] = _version(name)
    info["blas_env"] = {k: v for k, v in os.environ.items() if k.startswith("OPENBLAS")}
    info["tokenloom_commit"] = _git("rev-parse", "--short", "HEAD")
    info["tokenloom_tree"] = "modified" if _git("status", "--porcelain", "src") else "clean"
    return info


def _git(*args: str) -> str:
    out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
    return out.stdout.strip()


def _version(module: str) -> str:
    code = (
        f"import importlib.metadata as m, importlib; "
        f"n={'megatron-core' if module == 'megatron.core' else module!r}; "
        f"print(m.version(n))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    return out.stdout.strip() or "not installed"


def run_target(name: str, ctx: dict[str, Any]) -> list[dict[str, Any]]:
    """Run one target; a failure becomes a row with the error, never a crash."""
    import importlib

    module = {
        "blending": "bench_blending",
        "fetch": "bench_fetch",
        "warmstart": "bench_warmstart",
        "index": "bench_index_build",
        "preprocess": "preprocess_bridge",
        "scale": "scale_suite",  # issue 22: cold build, index memory, peers
        "attribution": "bench_attribution",  # issue 21 section 1: return_document_ranges cost
    }[name]
    t0 = time.perf_counter()
    try:
        rows = importlib.import_module(module).run(ctx)
    except Exception as error:  # noqa: BLE001 - one broken target must not stop the suite
        rows = [
            {
                "target": f"{report.TARGET_PREFIX[name]} {name}",
                "case": "-",
                "error": f"{type(error).__name__}: {error}",
            }
        ]
    for row in rows:
        row["target_wall_s"] = round(time.perf_counter() - t0, 1)
    return rows


def main(argv=None) -> int:
    args = parse_args(argv)
    wanted = [t.strip() for t in args.only.split(",") if t.strip()]
    unknown = set(wanted) - set(TARGETS)
    if unknown:
        print(f"run.py: unknown target(s) {sorted(unknown)}; choose from {TARGETS}")
        return 2
    ctx = dict(
        quick=args.quick,
        data=args.data_dir,
        work=args.work_dir,
        profile=not args.no_profile,
        megatron_at_scale=not args.no_megatron_at_scale,
    )
    Path(args.work_dir).mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "command": " ".join(["benchmarks/run.py", *sys.argv[1:]]),
        "quick": args.quick,
        "started": time.strftime("%Y-%m-%d %H:%M"),
        "machine": machine(),
        "loadavg_start": os.getloadavg(),
        "rows": [],
    }
    t0 = time.perf_counter()
    for name in wanted:
        print(f"== {name} ...", flush=True)
        rows = run_target(name, ctx)
        results["rows"].extend(rows)
        print(report.text_table(rows), flush=True)
    results["loadavg_end"] = os.getloadavg()
    results["runs"] = [
        {
            "command": results["command"],
            "started": results["started"],
            "targets": wanted,
            "loadavg_start": results["loadavg_start"][0],
            "loadavg_end": results["loadavg_end"][0],
        }
    ]
    results["total_s"] = round(time.perf_counter() - t0, 1)
    _merge_write(Path(args.results), results, wanted)
    print("\n" + report.text_table(results["rows"]))
    print(
        f"\nresults: {args.results}   total {results['total_s']:.0f} s   "
        f"load average {results['loadavg_start'][0]:.1f} -> {results['loadavg_end'][0]:.1f}"
    )
    if args.markdown:
        full = json.loads(Path(args.results).read_text())
        report.rewrite_markdown(Path(args.markdown), full)
        print(f"updated the generated section of {args.markdown}")
    return 0


def _merge_write(path: Path, results: dict[str, Any], wanted: list[str]) -> None:
    """With --only, keep the other targets' rows from the previous results file."""
    if set(wanted) != set(TARGETS) and path.exists():
        try:
            old = json.loads(path.read_text())
            if old.get("quick") != results["quick"]:
                raise ValueError("do not mix --quick rows with full rows")
            names = {report.TARGET_PREFIX[t] for t in wanted}
            kept = [r for r in old.get("rows", []) if r.get("target", "")[:1] not in names]
            results["rows"] = sorted(kept + results["rows"], key=lambda r: r["target"][:1])
            results["runs"] = [
                run for run in old.get("runs", []) if set(run["targets"]) - set(wanted)
            ] + results["runs"]
        except (OSError, ValueError):
            pass
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(results, indent=1, default=str))
    os.replace(tmp, path)


if __name__ == "__main__":
    sys.exit(main())

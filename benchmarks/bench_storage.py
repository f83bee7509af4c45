"""Object-storage benchmark: samples/s from a loopback S3 endpoint, tokenloom vs megatron-core.

``.bench-venv/bin/python benchmarks/bench_storage.py [--quick] [--repeats 2]``

Writes seeded corpora (``benchmarks/data.py``) under the work folder, serves them with
``benchmarks/s3_range_server.py`` on 127.0.0.1 (HEAD + ranged GET, cost = request +
bytes, optional ``--latency-ms``), and measures each side in its own process
(``benchmarks/storage_cases.py``): random documents, GPT samples (shuffled), a
3-dataset blend's samples, and documents read forward (read-ahead), for local mmap,
megatron-core's S3 reader (its defaults: 256 MiB chunk), and tokenloom's S3 / MSC
readers at several chunk sizes.  The server counts the bytes it sent, so every row
also shows how much each side read.  Results: ``benchmarks/results_storage.json``
and a Markdown table on stdout (min-max over the repeats).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

MIB = 1024 * 1024
BUCKET = "bench"
MSC_PYTHON = ROOT / ".venv" / "bin" / "python"  # has multi-storage-client


def _corpora(root: Path, quick: bool) -> dict[str, Any]:
    from data import write_corpus

    big_docs, blend_docs = (80_000, 20_000) if quick else (320_000, 80_000)
    data = root / BUCKET
    out = {"large": write_corpus(str(data / "large"), big_docs, seed=11, median=1000)}
    for j in range(3):
        out[f"part{j}"] = write_corpus(str(data / f"part{j}"), blend_docs, seed=20 + j, median=1000)
    return out


def _start_server(root: Path, latency_ms: float) -> tuple[subprocess.Popen, int]:
    server = subprocess.Popen(
        [
            sys.executable,
            str(HERE / "s3_range_server.py"),
            "--root",
            str(root),
            "--latency-ms",
            str(latency_ms),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    line = server.stdout.readline() if server.stdout else ""
    if not line.startswith("PORT "):
        server.kill()
        raise RuntimeError(f"the range server did not start: {line!r}")
    return server, int(line.split()[1])


def _served(port: int) -> dict[str, int]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/__stats", timeout=10) as answer:
        return json.loads(answer.read())


def _env(port: int, work: Path) -> dict[str, str]:
    endpoint = f"http://127.0.0.1:{port}"
    msc = work / "msc.json"
    msc.write_text(
        json.dumps(
            {
                "profiles": {
                    "bench": {
                        "storage_provider": {
                            "type": "s3",
                            "options": {
                                "base_path": BUCKET,
                                "endpoint_url": endpoint,
                                "region_name": "us-east-1",
                            },
                        }
                    }
                }
            }
        )
    )
    env = dict(
        os.environ,
        AWS_ACCESS_KEY_ID="bench",
        AWS_SECRET_ACCESS_KEY="bench",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_ENDPOINT_URL=endpoint,
        AWS_CONFIG_FILE="/dev/null",
        AWS_SHARED_CREDENTIALS_FILE="/dev/null",
        AWS_EC2_METADATA_DISABLED="true",
        MSC_CONFIG=str(msc),
    )
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    return env


def _sides(chunks: list[int], cached: tuple[int, ...] = ()) -> list[dict[str, Any]]:
    sides: list[dict[str, Any]] = [
        {"side": "tokenloom", "store": "local"},
        {"side": "megatron", "store": "s3"},
    ]
    sides += [{"side": "tokenloom", "store": "s3", "chunk": c * MIB} for c in chunks]
    sides += [{"side": "tokenloom", "store": "s3", "chunk": 256 * MIB, "cached": k} for k in cached]
    return sides


def cases(quick: bool) -> list[dict[str, Any]]:
    n = 300 if quick else 2000
    budget = 6.0 if quick else 15.0
    large, parts = ["large"], ["part0", "part1", "part2"]
    plan: list[dict[str, Any]] = []
    for side in _sides([256, 64, 16, 4, 1], cached=(4,)) + [
        {"side": "tokenloom", "store": "msc", "chunk": 4 * MIB}
    ]:
        plan.append(dict(side, workload="docs-random", data=large))
    for side in _sides([256, 4], cached=(4,)):
        plan.append(dict(side, workload="gpt", data=large))
    for side in _sides([256, 16, 4]):
        plan.append(dict(side, workload="blend", data=parts, weights=[0.5, 0.3, 0.2]))
    for chunk, ahead in ((16, 0), (16, 2), (4, 0), (4, 4)):
        plan.append(
            {
                "side": "tokenloom",
                "store": "s3",
                "chunk": chunk * MIB,
                "read_ahead": ahead,
                "workload": "docs-sequential",
                "data": large,
            }
        )
    plan.append({"side": "megatron", "store": "s3", "workload": "docs-sequential", "data": large})
    for case in plan:
        case.update(n=n * 10 if case["workload"] == "docs-sequential" else n, budget_s=budget)
    return plan


def _spec(case: dict[str, Any], corpora: dict[str, Any], work: Path) -> dict[str, Any]:
    spec = dict(case)
    scratch = Path(tempfile.mkdtemp(prefix="case-", dir=work))
    if case["store"] == "local":
        spec["prefixes"] = [corpora[d]["prefix"] for d in case["data"]]
    else:
        scheme = "s3://" + BUCKET if case["store"] == "s3" else "msc://bench"
        spec["prefixes"] = [f"{scheme}/{d}" for d in case["data"]]
    spec.update(idx_cache=str(scratch / "idx"), index_cache=str(scratch / "indices"))
    return spec


def run_case(spec: dict[str, Any], env: dict[str, str], port: int) -> dict[str, Any]:
    python = str(MSC_PYTHON) if spec["store"] == "msc" else sys.executable
    before = _served(port)
    done = subprocess.run(
        [python, str(HERE / "storage_cases.py"), json.dumps(spec)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    lines = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
    if done.returncode or not lines:
        return {"error": (done.stderr or done.stdout)[-2000:]}
    result = json.loads(lines[-1][len("RESULT ") :])
    after = _served(port)
    result["bytes_served"] = after["bytes"] - before["bytes"]
    result["requests"] = after["requests"] - before["requests"]
    return result


def label(case: dict[str, Any]) -> str:
    if case["store"] == "local":
        return "tokenloom, local mmap"
    if case["side"] == "megatron":
        return "megatron-core S3 (defaults: 256 MiB chunk)"
    text = f"tokenloom {case['store'].upper()}, {case['chunk'] // MIB} MiB chunk"
    if case.get("cached", 1) > 1:
        text += f", {case['cached']} cached"
    if case.get("read_ahead"):
        text += f", read-ahead {case['read_ahead']}"
    return text


def table(rows: list[dict[str, Any]]) -> str:
    out = [
        "| pattern | side | samples/s (min-max) | vs megatron-core | MiB read / sample |",
        "|---|---|---|---|---|",
    ]
    reference: dict[str, float] = {}
    for row in rows:
        if row["side"] == "megatron" and row.get("rates"):
            reference[row["workload"]] = max(row["rates"])
    for row in rows:
        rates = row.get("rates") or []
        if not rates:
            out.append(f"| {row['workload']} | {label(row)} | error | | |")
            continue
        ref = reference.get(row["workload"])
        ratio = f"{min(rates) / ref:.1f}-{max(rates) / ref:.1f}x" if ref else ""
        per = row.get("mib_per_sample")
        out.append(
            f"| {row['workload']} | {label(row)} | {min(rates):,.1f}-{max(rates):,.1f} | "
            f"{ratio} | {'' if per is None else f'{per:.2f}'} |"
        )
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small corpora, short runs")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--latency-ms", type=float, default=0.0)
    parser.add_argument("--work-dir", default="/tmp/tokenloom-bench/storage")
    parser.add_argument("--only", default="", help="comma-separated workloads")
    parser.add_argument("--json", default=str(HERE / "results_storage.json"))
    args = parser.parse_args()
    work = Path(args.work_dir)
    (work / "runs").mkdir(parents=True, exist_ok=True)
    corpora = _corpora(work / "data", args.quick)
    server, port = _start_server(work / "data", args.latency_ms)
    rows: list[dict[str, Any]] = []
    try:
        env = _env(port, work)
        wanted = set(filter(None, args.only.split(",")))
        for case in cases(args.quick):
            if wanted and case["workload"] not in wanted:
                continue
            results = [
                run_case(_spec(case, corpora, work / "runs"), env, port)
                for _ in range(args.repeats)
            ]
            good = [r for r in results if "samples_per_s" in r]
            row = dict(case, results=results, rates=[r["samples_per_s"] for r in good])
            if good and case["store"] != "local":
                row["mib_per_sample"] = (
                    sum(r["bytes_served"] for r in good)
                    / MIB
                    / max(1, sum(r["samples"] for r in good))
                )
            rows.append(row)
            shown = row["rates"] or [
                str(r.get("error", "")).strip().splitlines()[-1:] for r in results
            ]
            print(label(case), case["workload"], shown, flush=True)
    finally:
        server.terminate()
        server.wait(timeout=30)
    Path(args.json).write_text(
        json.dumps({"latency_ms": args.latency_ms, "quick": args.quick, "rows": rows}, indent=1)
    )
    print(table(rows))


if __name__ == "__main__":
    main()

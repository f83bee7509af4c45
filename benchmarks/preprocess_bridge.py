"""Target 5: preprocessing speed, by calling the PREPROCESS helper's bench_preprocess.py.

That script measures, per tokenizer, the tokenizer library's own batch-encode speed
on texts already in memory ("raw") and ``tokenloom preprocess`` from JSONL to
.bin/.idx with 1 and 2 workers. There is no megatron-core side: the baseline is the
raw tokenizer. It runs in its own process like every other measurement.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness import run_side

HERE = Path(__file__).resolve().parent


def tokenloom_preprocess(params: dict[str, Any], probe) -> dict[str, Any]:
    import bench_preprocess

    probe.imported()
    return {"report": bench_preprocess.main(params["argv"])}


def run(ctx: dict[str, Any]) -> list[dict[str, Any]]:
    if not (HERE / "bench_preprocess.py").exists():
        return [
            {
                "target": "5 preprocessing",
                "case": "-",
                "tokenloom_error": "benchmarks/bench_preprocess.py not there yet",
            }
        ]
    # 12 MB: with the 3 MB default a run of the faster tokenizers lasts about a second,
    # so the worker pool's fixed start (forking, loading the tokenizer: 50-75 ms) and
    # the last chunk's tail, not the throughput, decided the two-worker ratio
    argv = (
        ["--max-mb", "1", "--repeats", "2"]
        if ctx["quick"]
        else ["--max-mb", "12", "--repeats", "4"]
    )
    rep = run_side("preprocess_bridge:tokenloom_preprocess", {"argv": argv}, timeout=3600)
    if rep.get("error"):
        return [{"target": "5 preprocessing", "case": "-", "tokenloom_error": rep["error"]}]
    out = rep["report"]
    rows = []
    for name, res in out["results"].items():
        raw, one, two = res.get("raw"), res.get("workers=1"), res.get("workers=2")
        # ratios of runs done back to back in the same round (median over rounds)
        ratios = res.get("ratios", {})
        one_raw = ratios.get("w1/raw", one / raw if raw and one else None)
        two_one = ratios.get("w2/w1", two / one if one and two else None)
        base = {
            "target": "5 preprocessing",
            "tokenloom_peak_rss_mib": rep.get("peak_rss_mib"),
            "tokens": res.get("tokens"),
            "megabytes": out.get("megabytes"),
        }
        # the byte tokenizer has no encoder to compare with (its "raw" is str.encode):
        # its rows show the cost of reading and parsing, with no target
        judged = name != "bytes"
        if raw and one:
            rows.append(
                dict(
                    base,
                    case=f"{name}: 1 worker vs raw batch encode",
                    megatron_display=f"raw {raw / 1e6:.2f} Mtok/s",
                    tokenloom_display=f"{one / 1e6:.2f} Mtok/s",
                    ratio_display=f"{one_raw:.2f}x raw",
                    goal=">=0.85x raw" if judged else "none (no encoder)",
                    met=one_raw >= 0.85 if judged else None,
                    ratio=one_raw,
                )
            )
        if one and two:
            rows.append(
                dict(
                    base,
                    case=f"{name}: 2 workers vs 1 worker",
                    megatron_display=f"1 worker {one / 1e6:.2f} Mtok/s",
                    tokenloom_display=f"{two / 1e6:.2f} Mtok/s",
                    ratio_display=f"{two_one:.2f}x",
                    goal=">=1.6x (0.8 x 2 cores)" if judged else "none (no encoder)",
                    met=two_one >= 1.6 if judged else None,
                    ratio=two_one,
                )
            )
    if rows:
        rows[0]["notes"] = [
            f"{out.get('documents', 0):,} documents, "
            f"{out.get('megabytes', 0)} MB of stdlib text, "
            f"{out.get('repeats')} rounds; ratios: median of runs done "
            "back to back, each in a fresh process"
        ]
    return rows

"""Render results: a plain-text table for the terminal and the generated part of BENCHMARKS.md."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Optional

from rows import fmt_ratio, fmt_time

TARGET_PREFIX = {
    "blending": "1",
    "fetch": "2",
    "warmstart": "3",
    "index": "4",
    "preprocess": "5",
    "scale": "6",
    "attribution": "7",
}
START, END = "<!-- bench:generated:start -->", "<!-- bench:generated:end -->"


def goal(row: dict[str, Any]) -> tuple[str, Optional[bool]]:
    """The issue's target for this row and whether this run met it (None: not judged)."""
    t, sp = row.get("target", ""), row.get("speedup")
    eq = row.get("equal")
    if row.get("error") or sp is None and not t.startswith(("2 batch", "5", "7")):
        return "-", None
    if t.startswith("1"):
        if row.get("n_datasets") == 16384 and row.get("tokenloom_growth"):
            sub = row["tokenloom_growth"] < row["datasets_factor"]
            return (
                f"identical; sub-linear (x{row['tokenloom_growth']:.1f} for "
                f"x{row['datasets_factor']:,.0f} datasets)",
                bool(eq and sub),
            )
        if row.get("n_datasets") == 1024:
            return ">=10x, identical", bool(eq and sp >= 10)
        return "identical", bool(eq)
    if t.startswith("2 sample"):
        return ">=10x, same fields", bool(eq and sp >= 10)
    if t.startswith("2 batch"):
        r = row.get("batch_vs_floor")
        return (
            "<=4x bandwidth floor",
            None if r is None else bool(r <= 4 and row.get("equal", True)),
        )
    if t.startswith("3 warm"):
        return ">=10x", bool(sp >= 10 and eq is not False)
    if t.startswith("3 cold"):
        return ">=3x", bool(sp >= 3 and eq is not False)
    if t.startswith("4"):
        mem_ok = (row.get("tokenloom_rss_delta_mib") or 0) <= (
            row.get("megatron_rss_delta_mib") or 0
        ) + 1.0
        return ">=1x time, <= peak RSS", bool(eq and sp >= 1 and mem_ok)
    if t.startswith(("5", "7")):
        return row.get("goal", "-"), row.get("met")
    return "-", None


def _cells(row: dict[str, Any]) -> list[str]:
    text, met = goal(row)
    mark = {True: "yes", False: "NO", None: "-"}[met]
    same = {True: "yes", False: "NO", None: "-"}[row.get("equal")]
    mc = row.get("megatron_display") or (
        fmt_time(row.get("megatron_s")) if "megatron_error" not in row else "unavailable"
    )
    tl = row.get("tokenloom_display") or (
        fmt_time(row.get("tokenloom_s")) if "tokenloom_error" not in row else "unavailable"
    )
    ratio = row.get("ratio_display") or fmt_ratio(row.get("speedup"))
    rss = f"{_rss(row, 'megatron')} / {_rss(row, 'tokenloom')}"
    return [row.get("target", ""), row.get("case", ""), mc, tl, ratio, same, text, mark, rss]


def _rss(row: dict[str, Any], side: str) -> str:
    peak = row.get(f"{side}_peak_rss_mib")
    if peak is None:
        return "-"
    delta = row.get(f"{side}_rss_delta_mib")
    return f"{peak:.0f} (+{delta:.0f})" if delta is not None else f"{peak:.0f}"


HEADER = [
    "target",
    "case",
    "megatron-core (or baseline)",
    "tokenloom",
    "speed-up",
    "same output",
    "goal",
    "met",
    "peak RSS MiB mc / tl (+above imports)",
]


def expand(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows as shown: the fetch row is followed by a derived get_batch row."""
    out = []
    for row in rows:
        out.append(row)
        if row.get("target", "").startswith("2 sample") and "batch_vs_floor" in row:
            out.append(
                {
                    "target": "2 batch fetch",
                    "case": (f"get_batch, {row.get('tokenloom_batch_calls')} calls of 64 samples"),
                    "megatron_display": f"floor {fmt_time(row['batch_floor_s'])}",
                    "tokenloom_display": fmt_time(row["tokenloom_batch_s"]),
                    "ratio_display": f"{row['batch_vs_floor']:.1f}x floor",
                    "batch_vs_floor": row["batch_vs_floor"],
                    "equal": row.get("batch_equal"),
                }
            )
    return out


def text_table(rows: list[dict[str, Any]]) -> str:
    table = [HEADER] + [_cells(r) for r in expand(rows)]
    widths = [max(len(str(line[i])) for line in table) for i in range(len(HEADER))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(line, widths)) for line in table]
    errors = [
        f"  ! {r.get('target')} / {r.get('case')}: {r.get(k)}"
        for r in rows
        for k in ("error", "megatron_error", "tokenloom_error", "why")
        if r.get(k)
    ]
    return "\n".join(lines + errors)


def markdown(results: dict[str, Any]) -> str:
    rows = results["rows"]
    runs = results.get("runs") or [
        {
            "command": results["command"],
            "started": results["started"],
            "targets": [],
            "loadavg_start": results["loadavg_start"][0],
            "loadavg_end": results["loadavg_end"][0],
        }
    ]
    out = [
        f"{'QUICK mode: small sizes, not the issue sizes. ' if results['quick'] else ''}"
        "Generated by "
        + "; ".join(
            f"`{run['command']}` on {run['started']} (load average {run['loadavg_start']:.1f}"
            f" -> {run['loadavg_end']:.1f} on 2 cores)"
            for run in runs
        )
        + ".",
        "",
        "| " + " | ".join(HEADER) + " |",
        "|" + "---|" * len(HEADER),
    ]
    out += ["| " + " | ".join(str(c) for c in _cells(r)) + " |" for r in expand(rows)]
    problems = [
        f"- {r.get('target')} / {r.get('case')} ({k.replace('_error', '')}): {r.get(k)}"
        for r in rows
        for k in ("error", "megatron_error", "tokenloom_error", "why")
        if r.get(k)
    ]
    if problems:
        out += ["", "Problems in this run:", ""] + [p.replace("\n", " ") for p in problems]
    out += _details(rows) + _machine(results)
    return "\n".join(out)


def _details(rows: list[dict[str, Any]]) -> list[str]:
    out = ["", "### Details", ""]
    for r in rows:
        t = r.get("target", "")
        bits = []
        for side in ("megatron", "tokenloom"):
            if r.get(f"{side}_us_per_sample") is not None:
                bits.append(f"{side} {r[f'{side}_us_per_sample']:.2f} us/sample")
            if r.get(f"{side}_build_s") is not None:
                bits.append(
                    f"{side}: build {fmt_time(r[f'{side}_build_s'])}, first sample "
                    f"{fmt_time(r[f'{side}_first_sample_s'])}, imports (not timed) "
                    f"{fmt_time(r.get(f'{side}_import_s'))}"
                    + (
                        f", CPU time {fmt_time(r[f'{side}_cpu_s'])}"
                        if r.get(f"{side}_cpu_s") is not None
                        else ""
                    )
                )
            if r.get(f"{side}_fds_per_prefix") is not None:
                bits.append(
                    f"{side} holds {r[f'{side}_fds_per_prefix']:.1f} open files "
                    f"per prefix afterwards"
                )
            if r.get(f"{side}_document_s") is not None:
                bits.append(
                    f"{side}: document {fmt_time(r[f'{side}_document_s'])}, sample "
                    f"{fmt_time(r[f'{side}_sample_s'])}, shuffle "
                    f"{fmt_time(r[f'{side}_shuffle_s'])}"
                )
        if r.get("tokenloom_batch_per_sample_us") is not None:
            bits.append(
                f"get_batch {r['tokenloom_batch_per_sample_us']:.2f} us/sample, "
                f"{r['tokenloom_batch_bytes_per_call'] / 2**20:.1f} MiB moved per "
                f"call, copy bandwidth {r.get('bandwidth_gbs', 0):.1f} GB/s"
            )
        for key in ("dtype_notes", "notes"):
            if r.get(key):
                bits.append("; ".join(r[key]))
        if bits:
            out.append(f"- **{t}, {r.get('case')}**: " + "; ".join(bits))
    out += _profiles(rows)
    return out


def _profiles(rows: list[dict[str, Any]]) -> list[str]:
    out = []
    for r in rows:
        for side, prof in (r.get("profiles") or {}).items():
            if not prof:
                continue
            out += [
                "",
                f"Where the time goes, {side}, {r['case']} (cProfile self time, "
                f"total {prof['total_s']:.2f} s under the profiler):",
                "",
            ]
            groups = [(k, v) for k, v in prof["groups"].items() if v >= 0.002]
            out.append(", ".join(f"{k} {v:.3f} s" for k, v in groups[:10]))
            out += [
                "",
                "| cumulative | self | calls | function (outer wrappers omitted) |",
                "|---|---|---|---|",
            ]
            out += [
                f"| {f['cum_s']:.3f} s | {f['self_s']:.3f} s | {f['calls']} | `{f['func']}` |"
                for f in prof["top_cumulative"][:8]
            ]
            out += [
                "",
                "Top self time: "
                + ", ".join(
                    f"`{f['func']}` {f['self_s']:.3f} s ({f['calls']} calls)"
                    for f in prof["top_self"][:5]
                ),
            ]
    return out


def _machine(results: dict[str, Any]) -> list[str]:
    m = results["machine"]
    keys = (
        "cpu",
        "cpus",
        "cpus_usable",
        "memory_gib",
        "platform",
        "python",
        "numpy",
        "torch",
        "numba",
        "megatron.core",
        "tokenloom",
        "tokenloom_commit",
        "tokenloom_tree",
        "blas_env",
    )
    return [
        "",
        "Machine: "
        + "; ".join(f"{k} {m.get(k)}" for k in keys if k in m)
        + f". Total run time {results.get('total_s', 0):.0f} s.",
    ]


def rewrite_markdown(path: Path, results: dict[str, Any]) -> None:
    """Replace the text between the generated-section markers (append them if absent)."""
    body = f"{START}\n{markdown(results)}\n{END}"
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    if START in text and END in text:
        text = re.sub(re.escape(START) + ".*?" + re.escape(END), lambda _: body, text, flags=re.S)
    else:
        text = text.rstrip("\n") + "\n\n## Results\n\n" + body + "\n"
    path.write_text(text)

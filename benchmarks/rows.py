"""One result row per benchmark case: both sides' time and memory, and their ratio."""

from __future__ import annotations

from typing import Any, Optional


def pair_row(
    target: str,
    case: str,
    mc: dict[str, Any],
    tl: dict[str, Any],
    *,
    per: Optional[int] = None,
    per_unit: str = "",
    check: Optional[dict] = None,
    metric: str = "min_s",
) -> dict[str, Any]:
    """Combine a megatron-core report and a tokenloom report into one row.

    ``speedup`` is megatron time / tokenloom time (>1: tokenloom is faster).
    ``*_rss_delta_mib`` is the peak RSS above what the child had after its imports
    and inputs were loaded (its ``probe.imported()`` mark).
    """
    row: dict[str, Any] = {"target": target, "case": case, "notes": []}
    for side, rep in (("megatron", mc), ("tokenloom", tl)):
        if rep.get("error"):
            row[f"{side}_error"] = rep["error"]
            continue
        seconds = rep.get(metric)
        row[f"{side}_s"] = seconds
        row[f"{side}_runs"] = rep.get("runs")
        if per and seconds is not None:
            row[f"{side}_us_per_{per_unit}"] = seconds / per * 1e6
        row[f"{side}_peak_rss_mib"] = rep.get("peak_rss_mib")
        base = rep.get("rss_base_mib")
        if base is not None and rep.get("peak_rss_mib") is not None:
            row[f"{side}_rss_delta_mib"] = round(rep["peak_rss_mib"] - base, 1)
        for key, value in rep.items():
            if key.startswith("x_"):
                row[f"{side}_{key[2:]}"] = value
    if row.get("megatron_s") and row.get("tokenloom_s"):
        row["speedup"] = row["megatron_s"] / row["tokenloom_s"]
    if check:
        row.update(check)
    return row


def fmt_time(seconds: Optional[float]) -> str:
    """Human-readable duration."""
    if seconds is None:
        return "n/a"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds:.2f} s"


def fmt_ratio(ratio: Optional[float]) -> str:
    if ratio is None:
        return "n/a"
    return f"{ratio:.1f}x" if ratio < 100 else f"{ratio:,.0f}x"

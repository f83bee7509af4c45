"""How ``tokenloom plan`` shows a plan: the text report and the ``--plot`` figure.

Both read the data of :func:`tokenloom.cli.plan.as_data` (what ``--json`` prints).
"""

from __future__ import annotations

import sys
from typing import Any

from tokenloom.errors import ConfigError

__all__ = ["human_bytes", "human_seconds", "plot", "print_plan"]


def human_bytes(count: float) -> str:
    """``1536`` -> ``1.5 KiB``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if count < 1024 or unit == "TiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} TiB"  # pragma: no cover


def human_seconds(seconds: float) -> str:
    """``0.25`` -> ``0.25 s``, ``4000`` -> ``1 h 6 min``."""
    if seconds < 60:
        return f"{seconds:.2f} s"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60)} min"


def _steps(source: dict[str, Any]) -> str:
    ends = source["epoch_end_steps"]
    shown = ", ".join(f"{s:,}" for s in ends[:4]) + (", ..." if len(ends) > 4 else "")
    return shown or "-"


def _print_split(split: dict[str, Any]) -> None:
    if split["empty_reason"] is not None:
        print(f"{split['name']} split: empty ({split['empty_reason']})")
        return
    asked = "one epoch" if split["asked"] is None else f"{split['asked']:,} asked"
    kind = "blend" if split["blended"] else "sets" if len(split["sources"]) > 1 else "dataset"
    exact = "" if split["exact"] else " (per-source counts approximate: a very large blend)"
    print(
        f"{split['name']} split: {split['samples']:,} samples ({asked}), "
        f"{len(split['sources'])} source(s) in a {kind}{exact}"
    )
    print(
        f"  {'weight':>7} {'tokens avail':>14} {'samples':>12} {'tokens given':>15} "
        f"{'epochs':>6} {'repeats':>8}  epoch ends (step)     source"
    )
    for source in split["sources"]:
        if source["error"]:
            print(
                f"  {'-':>7} {source['tokens']:>14,} {'-':>12} {'-':>15} {'-':>6} {'-':>8}  "
                f"{'-':<20}  {source['source']} (cannot be built)"
            )
            continue
        print(
            f"  {source['weight']:>7.3f} {source['tokens']:>14,} {source['drawn']:>12,} "
            f"{source['tokens_drawn']:>15,} {source['epochs']:>6} {source['repeats']:>7.2f}x  "
            f"{_steps(source):<20}  {source['source']}"
        )


def print_plan(data: dict[str, Any]) -> None:
    """Print the plan for a reader; warnings also go to stderr."""
    print(
        f"sequence length {data['sequence_length']}, global batch size "
        f"{data['global_batch_size']}; steps are {data['steps_are']}"
    )
    for split in data["splits"]:
        _print_split(split)
    for line in data["warnings"]:
        print(f"WARNING: {line}")
        print(f"tokenloom plan: WARNING: {line}", file=sys.stderr)
    estimate = data["estimate"]
    parts = ", ".join(f"{name} {human_bytes(n)}" for name, n in estimate["index_bytes"].items())
    print(f"indices:             {parts}")
    print(
        f"memory of indices:   {human_bytes(estimate['indices_memory_bytes'])}; cache about "
        f"{human_bytes(estimate['cache_bytes'])} in {estimate['cache_entries']} entries"
    )
    print(
        f"cold build:          about {human_seconds(estimate['cold_build_seconds'])}; first "
        f"batch after about {human_seconds(estimate['first_batch_seconds'])}"
    )
    print(f"rates:               {data['rates']['source']}")


def plot(data: dict[str, Any], path: str) -> None:
    """Draw per-source cumulative tokens over steps and epochs per source to ``path``."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as pyplot
    except ImportError:
        raise ConfigError(
            "--plot needs matplotlib: pip install 'tokenloom[plot]' (or pip install matplotlib)"
        ) from None
    splits = [s for s in data["splits"] if s["empty_reason"] is None and s["sources"]]
    figure, axes = pyplot.subplots(
        len(splits) or 1, 2, figsize=(12, 3.5 * max(len(splits), 1)), squeeze=False
    )
    gbs, seq = data["global_batch_size"], data["sequence_length"]
    for row, split in zip(axes, splits):
        steps = max(split["samples"] // gbs, 1)
        for source in split["sources"]:
            share = source["drawn"] / max(split["samples"], 1)
            row[0].plot([0, steps], [0, source["drawn"] * seq], label=source["source"][-40:])
            for end in source["epoch_end_steps"]:
                row[0].plot([end], [share * (end + 1) * gbs * seq], "k|")
        row[0].set(
            title=f"{split['name']}: tokens per source",
            xlabel=data["steps_are"],
            ylabel="cumulative tokens",
        )
        row[0].legend(fontsize="small")
        names = [s["source"][-24:] for s in split["sources"]]
        row[1].barh(names, [s["repeats"] for s in split["sources"]])
        row[1].set(title=f"{split['name']}: repetitions per source", xlabel="epochs (repeats)")
    figure.tight_layout()
    figure.savefig(path, format="png")
    pyplot.close(figure)

"""``tokenloom plan``: what a training config will give, before anything is built.

Reads the config ``preview`` and ``prepare-cache`` take, opens each prefix's ``.idx``
(nothing else), and prints per split and source the tokens available, the weight, the
samples and tokens it gives, its epochs and repetitions and the step at which each
epoch ends; warnings (a source repeated past a cap, never drawn, an empty split, a
split smaller than asked); the sizes of the indices and caches; and estimated cold
build time and time to first batch from this machine's rates (``--calibrate``).
The figures are the builder's own (:mod:`tokenloom.cli._plan_figures`).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from tokenloom.cli._numbers import Bound, check_numbers
from tokenloom.errors import ConfigError

_DESCRIPTION = """\
Plan a training run from its config (the file `tokenloom prepare-cache --config` and
`tokenloom preview --config` read, Megatron's keys included) without building any
index: each prefix's .idx is opened for its document and token counts, and the sizes,
epochs and blend draws are computed with the builder's own rules. Printed per split
and source: tokens available, weight, samples and tokens given, epochs (GPTDataset's
count, as Megatron logs it), repetitions (tokens given / tokens available), and the
step (global batch) at which each repetition ends; then warnings, the bytes of every
index (document_index, sample_index, shuffle_index, blend indices), and the estimated
cold build time and time to first batch.

The estimates use per-element rates measured on this machine by `tokenloom plan
--calibrate` (a few seconds of small real builds), stored in
$TOKENLOOM_PLAN_RATES, else $XDG_CACHE_HOME/tokenloom/plan-rates.json (default
~/.cache/tokenloom/plan-rates.json). Without that file, built-in defaults are used
and the output says so.

The repetition cap is the config's max_epochs_per_source when present, else
--max-epochs (default 4; inf: no cap).
"""

_EPILOG = """\
examples:
  tokenloom plan --calibrate
  tokenloom plan --config train.json
  tokenloom plan --config train.json --json > plan.json
  tokenloom plan --config train.json --plot plan.png
"""
_CAP_KEYS = ("max_epochs_per_source", "max-epochs-per-source")


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``plan`` subcommand."""
    parser = subparsers.add_parser(
        "plan",
        help="samples, epochs, index sizes and build time of a training config, unbuilt",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", metavar="FILE", help="the training config (JSON or YAML)")
    parser.add_argument(
        "--calibrate", action="store_true", help="measure this machine's build rates first"
    )
    parser.add_argument(
        "--max-epochs",
        type=float,
        default=4.0,
        metavar="R",
        help="warn when a source repeats more than R times (R > 0, default 4; inf: never)",
    )
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    parser.add_argument("--plot", metavar="PNG", help="draw tokens per source over steps")
    parser.set_defaults(func=run)
    return parser


def load_config(path: str) -> tuple[dict[str, Any], Any]:
    """The canonical settings of ``path`` (prepare-cache's reading) and its repetition cap
    (None, a number or one per source: the config field ``max_epochs_per_source``)."""
    from tokenloom.cli.prepare_cache import canonical_settings, read_config_mapping
    from tokenloom.datasets.repetition import check_cap

    raw = dict(read_config_mapping(path))
    caps = [raw.pop(key) for key in _CAP_KEYS if key in raw]
    cap = caps[-1] if caps else None
    if isinstance(cap, list):  # one per source: counted against the blend in warnings_of
        cap = check_cap(cap, [""] * len(cap), f"--config {path}: max_epochs_per_source")
    else:
        cap = check_cap(cap, None, f"--config {path}: max_epochs_per_source")
    return canonical_settings(raw, source=f"--config {path}"), cap


def compute(settings: dict[str, Any], cap: Any = None) -> dict[str, Any]:
    """The figures of a config: ``{"global_batch_size", "steps_are", "splits"}`` (``cap``:
    the repetition cap, for where each source passes it)."""
    from tokenloom.builder.sizes import check_sizes_against_weights
    from tokenloom.cli._plan_figures import plan_splits
    from tokenloom.cli.prepare_cache import compute_plan, make_config

    sized = dict(settings)
    steps_are = "global batches"
    if sized.get("global_batch_size") is None and sized.get("micro_batch_size") is None:
        sized["global_batch_size"], steps_are = 1, "samples (no global_batch_size given)"
    config, training = make_config(sized), compute_plan(sized)
    check_sizes_against_weights(config, training.sizes)
    return {
        "global_batch_size": training.global_batch_size,
        "steps_are": steps_are,
        "sequence_length": int(config.sequence_length),
        "extra": int(config.add_extra_token_to_sequence),
        "splits": plan_splits(config, list(training.sizes), cap),
    }


def warnings_of(splits: list[Any], cap: Any, seq: int, extra: int) -> list[str]:
    """Every warning of the plan, one line each (``cap``: a number or one per source)."""
    from tokenloom.datasets.repetition import cap_of

    lines = []
    for split in splits:
        if isinstance(cap, list) and len(cap) != len(split.sources) and split.sources:
            raise ConfigError(
                f"max_epochs_per_source has {len(cap)} caps but the {split.name} split blends "
                f"{len(split.sources)} sources: give one per prefix of blend"
            )
        if split.empty_reason is not None and split.asked:
            lines.append(
                f"{split.name} split is empty ({split.empty_reason}) but {split.asked:,} "
                "samples were asked"
            )
        for k, mid in enumerate(split.sources):
            where, limit = f"{mid.source} ({split.name})", cap_of(cap, k)
            if mid.error:
                lines.append(f"{where}: the build will fail: {mid.error}")
            elif split.asked and (mid.weight == 0 or mid.drawn == 0):
                lines.append(f"{where} is never drawn (weight {mid.weight:.4g}, 0 samples)")
            elif repeats(mid, seq, extra) > limit:
                lines.append(
                    f"{where} is repeated {repeats(mid, seq, extra):.2f} times ({mid.epochs} epochs "
                    f"of {mid.tokens:,} tokens), past the cap of {limit:g}"
                    + ("" if mid.cap_sample is None else f" from global sample {mid.cap_sample:,}")
                )
        if split.asked is not None and split.empty_reason is None and split.samples < split.asked:
            lines.append(
                f"{split.name} split gives {split.samples:,} samples, fewer than the "
                f"{split.asked:,} asked"
            )
    return lines


def repeats(mid: Any, seq: int, extra: int) -> float:
    """How many times the source's tokens are served (preview's repetitions, the figure
    the builder checks ``max_epochs_per_source`` against)."""
    from tokenloom.datasets.repetition import repetitions

    return repetitions(mid.drawn, mid.tokens, seq, extra)


def loads_kernels(mids: list[Any], blends: list[Any]) -> bool:
    """Whether the build takes a numba kernel's route (then it pays their loading once):
    :mod:`tokenloom.index.dispatch`'s thresholds on each sample index, each shuffled
    array (``MidPlan.shuffled``) and each blend."""
    from tokenloom.index import dispatch

    return any(
        mid.epochs * mid.documents > dispatch.SAMPLE_VECTORIZED_MAX_DOCUMENTS
        or any(length >= dispatch.SHUFFLE_KERNEL_MIN_SIZE for length in mid.shuffled)
        for mid in mids
    ) or any(  # no dataset started numba: a blend's own limit before it is higher
        dispatch.blending_route(len(split.sources), split.samples, numba_started=False)
        != dispatch.NUMPY
        for split in blends
    )


def estimate(splits: list[Any], rates: dict[str, float], gbs: int, seq: int) -> dict[str, Any]:
    """Bytes of the indices, whether the build loads numba kernels (then ``startup`` is
    in its time) and the cold build / first batch seconds."""
    mids = [mid for split in splits for mid in split.sources if not mid.error]
    blends = [split for split in splits if split.blended and split.blend_bytes]
    names = ("document_index", "sample_index", "shuffle_index")
    index_bytes = {name: sum(mid.index_bytes.get(name, 0) for mid in mids) for name in names}
    index_bytes["blend_indices"] = sum(sum(split.blend_bytes.values()) for split in blends)
    loads = loads_kernels(mids, blends)
    build = rates["startup"] * loads + sum(
        rates["dataset"]
        + rates["document_element"] * mid.epochs * mid.documents
        + rates["sample"] * mid.samples
        for mid in mids
    )
    build += sum(rates["blend"] + rates["blend_sample"] * split.samples for split in blends)
    batch = gbs * (rates["fetch_sample"] + rates["fetch_token"] * seq)
    entries = len(mids) + len(blends)
    return {
        "index_bytes": index_bytes,
        "indices_memory_bytes": sum(index_bytes.values()),
        "cache_bytes": sum(index_bytes.values()) + 4096 * entries,
        "cache_entries": entries,
        "loads_kernels": loads,
        "cold_build_seconds": build,
        "first_batch_seconds": build + batch,
    }


def as_data(figures: dict[str, Any], cap: Any, rates: dict[str, Any]) -> dict[str, Any]:
    """The whole plan as JSON-ready data (what ``--json`` prints)."""
    from dataclasses import asdict

    gbs, seq, extra = (figures[k] for k in ("global_batch_size", "sequence_length", "extra"))
    splits = []
    for split in figures["splits"]:
        record = asdict(split)
        for source, mid in zip(record["sources"], split.sources):
            source["tokens_drawn"] = mid.drawn * seq
            source["repeats"] = repeats(mid, seq, extra)
            source["epoch_end_steps"] = [n // gbs for n in mid.epoch_end_samples]
        splits.append(record)
    return {
        "global_batch_size": gbs,
        "sequence_length": seq,
        "steps_are": figures["steps_are"],
        "max_epochs": cap if isinstance(cap, list) or math.isfinite(cap) else None,
        "splits": splits,
        "warnings": warnings_of(figures["splits"], cap, seq, extra),
        "estimate": estimate(figures["splits"], rates["rates"], gbs, seq),
        "rates": rates,
    }


def _rates(calibrate: bool) -> dict[str, Any]:
    from tokenloom.cli import _plan_rates

    if calibrate:
        stored = _plan_rates.store_rates(_plan_rates.calibrate())
        print(f"calibrated: rates of this machine stored in {stored}", file=sys.stderr)
    values, path = _plan_rates.load_rates()
    return {"rates": values, "source": path or "defaults (not calibrated: run plan --calibrate)"}


def run(args: argparse.Namespace) -> int:
    """Entry point of the subcommand."""
    from tokenloom.cli._plan_report import plot, print_plan

    check_numbers(
        args,
        (Bound("max_epochs", "--max-epochs", 0, low_open=True, integer=False, allow_inf=True),),
    )
    if args.config is None and not args.calibrate:
        raise ConfigError("give --config FILE (the training config), or --calibrate")
    rates = _rates(args.calibrate)
    if args.config is None:
        return 0
    settings, cap = load_config(args.config)
    cap = args.max_epochs if cap is None else cap
    data = as_data(compute(settings, cap), cap, rates)
    if args.plot:
        plot(data, args.plot)
    if args.json:
        print(json.dumps(data, indent=1))
    else:
        print_plan(data)
        if args.plot:
            print(f"plot: {args.plot}")
    return 0

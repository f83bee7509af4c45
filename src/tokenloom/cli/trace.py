"""``tokenloom trace``: what a training run's loader serves, step by step (docs/trace.md)."""

from __future__ import annotations

import argparse
import json
from typing import Any, Optional

from tokenloom.attributes import read_attribute
from tokenloom.errors import ConfigError

SPLITS = ("train", "valid", "test")

_DESCRIPTION = """\
Trace a training run's data order offline, from its config (the file `tokenloom
preview --config` and `prepare-cache --config` read, Megatron's keys included) and,
for a resumed run, the loader state it resumed from. The order is the loader's own:
each data-parallel rank's sampler is built by build_pretraining_data_loader at the
consumed count the run is at, so the trace equals what the run's loaders serve.

A global batch (one step, 0-based) is global_batch_size samples: the micro-steps in
turn, each rank 0's micro-batch, then rank 1's, ... Each sample is named by its source
prefix, its dataset_id in the blend and its document ranges: rows (document id, token
start, token end), the offsets relative to the document, the end exclusive.

Loader settings (config keys beside prepare-cache's, or flags; prepare-cache, preview
and plan accept them too): dataloader_type (single, cyclic or elastic; default single),
data_sharding (cyclic; default true), loader_seed (elastic; default 0), drop_last,
hybrid_context_parallel (single), skip_batches ([[first, end], ...]: steps never
served), block_documents (["PREFIX:ID", ...] or a file: loss_mask 0 on their labels),
micro_batch_size (default: global_batch_size / data-parallel size),
max_seqlen_per_dp_cp_rank (--hybrid-cp: the wrapper's tokens per rank; default
seq_length). The data-parallel size is world_size / (TP x PP x CP).

--step N --hybrid-cp adds, per sample, "hybrid_cp": its sub-samples (cu_seqlens cuts)
as HybridCPDataLoaderWrapper reroutes them: subsample_id (the wrapper's global id),
token_start, token_end (in the sample), microbatch (index into sample_id_groups) and
dp_cp_ranks (the ranks of the DP x CP group, DP x context_parallel_size ranks, that
run it), from the wrapper's own BalancedCPScheduler over the step's lengths.

Modes:
  --step N             the samples of global batch N (--json: as data; --decode: text)
  --document PREFIX:ID every step that trains on a document: first step, count, epochs
  --manifest OUT       a checksummed digest per step of the data order (--steps A:B)
  --diff M1 M2         the first step at which two manifests differ, and what differs
                       (exit status 1 when they differ)

--state FILE traces a run resumed from a saved PretrainingDataLoader.state_dict(),
written with torch.save or as JSON (json.dump); its sampler arguments win over the
config's (an elastic run keeps the config's data-parallel size). A real loader over the
config's dataset loads it, as the run's did: its skipped steps, and a mixture change
(the config's blend continuing the saved sources; --allow-mixture-change, as the run's
load_state_dict(state, allow_mixture_change=True)), or one recorded in the state, are
followed from the loader's own state and served dataset.
"""

_EPILOG = """\
examples:
  tokenloom trace --config train.json --step 0
  tokenloom trace --config train.json --step 120 --json --decode
  tokenloom trace --config train.json --document data/web_text_document:17
  tokenloom trace --config train.json --manifest run.manifest --steps 0:1000
  tokenloom trace --config train.json --state loader_state.pt --manifest resumed.manifest
  tokenloom trace --config new_mix.json --state loader_state.pt --allow-mixture-change --step 500
  tokenloom trace --diff run.manifest resumed.manifest
"""


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``trace`` subcommand."""
    parser = subparsers.add_parser(
        "trace",
        help="which documents each step of a run trains on; manifests of the data order",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", metavar="FILE", help="the training config (JSON or YAML)")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--step", type=int, metavar="N", help="trace global batch N (0-based)")
    mode.add_argument("--document", metavar="PREFIX:ID", help="the steps that train on it")
    mode.add_argument("--manifest", metavar="OUT", help="write the data-order manifest")
    mode.add_argument("--diff", nargs=2, metavar=("M1", "M2"), help="compare two manifests")
    parser.add_argument("--steps", metavar="A:B", help="--manifest: steps A to B-1 (default all)")
    parser.add_argument(
        "--split",
        choices=SPLITS,
        default="train",
        help="the split whose loader is traced (default train; valid and test: a loader "
        "over that split from sample 0, full_validation as the config says)",
    )
    parser.add_argument("--state", metavar="FILE", help="the loader state the run resumed from")
    parser.add_argument(
        "--allow-mixture-change",
        action="store_true",
        help="--state: the run loaded it with load_state_dict(state, allow_mixture_change=True)",
    )
    parser.add_argument(
        "--allow-data-change",
        action="store_true",
        help="--state: the run loaded it with load_state_dict(state, allow_data_change=True)",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--decode", action="store_true", help="--step: decode each range")
    parser.add_argument(
        "--hybrid-cp",
        action="store_true",
        help="--step: per sub-sample (cu_seqlens), the HybridCPDataLoaderWrapper micro-batch "
        "and DP x CP ranks it is served on after rerouting (BalancedCPScheduler over the "
        "step's lengths); needs hybrid_context_parallel and inter_document_masking",
    )
    parser.add_argument("--tokenizer", metavar="SPEC", help="decode with it (default: sidecar)")
    parser.add_argument(
        "--dataloader-type", choices=("single", "cyclic", "elastic"), help="override the config"
    )
    parser.set_defaults(func=run)
    return parser


def _load_state(path: str) -> dict[str, Any]:
    """A loader state saved as JSON or with torch.save (read with weights_only=True)."""
    from tokenloom.untrusted_json import loads_json, read_bounded

    try:
        raw = read_bounded(path, what="--state file")
        if raw.lstrip()[:1] == b"{":
            state = loads_json(raw, source=path, what="--state file")
        else:
            import io

            import torch

            state = torch.load(io.BytesIO(raw), map_location="cpu", weights_only=True)
    except OSError as error:
        raise ConfigError(f"--state {path}: cannot read it ({error})") from None
    except Exception as error:  # torch's unpickler raises many kinds
        if isinstance(error, ConfigError):
            raise
        raise ConfigError(f"--state {path}: not a saved loader state ({error})") from None
    if not isinstance(state, dict):
        raise ConfigError(
            f"--state {path}: expected the dict of PretrainingDataLoader.state_dict()"
        )
    return state


def _flag(value: Any, name: str, default: bool) -> bool:
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ConfigError(f"{name}={value!r}: must be true or false")
    return value


def _layout(args: argparse.Namespace, loader: dict[str, Any], settings: Any, plan: Any) -> Any:
    """The run's loader layout from the config's loader keys and the training plan."""
    from tokenloom.cli._trace_order import Layout

    dp = plan.data_parallel_size
    mbs = settings.get("micro_batch_size") or max(plan.global_batch_size // dp, 1)
    seed = loader.get("loader_seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ConfigError(f"loader_seed={seed!r}: must be an integer >= 0")
    layout = Layout(
        dataloader_type=args.dataloader_type or str(loader.get("dataloader_type", "single")),
        micro_batch_size=int(mbs),
        global_batch_size=plan.global_batch_size,
        data_parallel_size=dp,
        data_sharding=_flag(loader.get("data_sharding"), "data_sharding", True),
        seed=seed,
        drop_last=_flag(loader.get("drop_last"), "drop_last", True),
        hybrid_context_parallel=_flag(
            loader.get("hybrid_context_parallel"), "hybrid_context_parallel", False
        ),
        context_parallel_size=plan.context,
        # as given: --hybrid-cp hands it to BalancedCPScheduler, whose check names the key
        max_seqlen_per_dp_cp_rank=loader.get("max_seqlen_per_dp_cp_rank"),
    )
    if layout.dataloader_type not in ("single", "cyclic", "elastic"):
        raise ConfigError(
            f"dataloader_type={layout.dataloader_type!r}: trace follows single, cyclic or elastic"
        )
    return layout


def load_run(args: argparse.Namespace) -> tuple[Any, Any, Any, Any]:
    """``(dataset, layout, resume point or None, quarantine)`` of the config's split
    ``args.split`` (default train; and of ``args.state``, the loader state the run
    resumed from)."""
    from tokenloom.builder import BlendedMegatronDatasetBuilder
    from tokenloom.cli._trace_order import check_layout, layout_from_state, load_state
    from tokenloom.cli._trace_quarantine import quarantine_of, resumed
    from tokenloom.cli.prepare_cache import (
        LOADER_SETTINGS,
        compute_plan,
        load_settings_file,
        make_config,
    )
    from tokenloom.datasets import GPTDataset

    if not args.config:
        raise ConfigError("give --config FILE: the training config of the run to trace")
    split = _split_of(args, args.state)
    settings = load_settings_file(args.config)
    loader = {key: settings.pop(key) for key in LOADER_SETTINGS if key in settings}
    plan = compute_plan(settings)
    layout = _layout(args, loader, settings, plan)
    resume, state = None, _load_state(args.state) if args.state else None
    if state is not None:
        layout, resume = layout_from_state(state, layout, args.allow_mixture_change)
    check_layout(layout)
    built = BlendedMegatronDatasetBuilder(
        GPTDataset, plan.sizes, lambda: True, make_config(settings)
    ).build()
    dataset = built[SPLITS.index(split)]
    if dataset is None or len(dataset) == 0:
        raise ConfigError(f"--config {args.config}: the {split} split is empty; nothing to trace")
    if split != "train":  # skip_batches name training steps; the block list holds
        loader = {key: value for key, value in loader.items() if key != "skip_batches"}
        layout = _resolved(dataset, layout, settings.get("full_validation"))
    quarantine = quarantine_of(dataset, loader)
    if state is not None:
        allow = {
            "allow_data_change": args.allow_data_change,
            "allow_mixture_change": args.allow_mixture_change,
        }
        loaded, dataset = load_state(dataset, layout, state, quarantine, **allow)
        quarantine = resumed(quarantine, loaded["skip_batches"])
    return dataset, layout, resume, quarantine


def _split_of(args: argparse.Namespace, state: Any) -> str:
    split = read_attribute(args, "split", None) or "train"
    if split != "train" and state is not None:
        raise ConfigError(
            f"--split {split} --state: a saved loader state is the train loader's; "
            "trace the valid and test splits without --state (their loaders start at 0)"
        )
    return str(split)


def _resolved(dataset: Any, layout: Any, full_validation: Any) -> Any:
    """``layout`` as the loader resolves it over ``dataset``: with ``full_validation``
    on the valid split, one ``single`` pass (the loader's own rule, resolved_options)."""
    from dataclasses import replace

    from tokenloom.training.sampler_choice import resolved_options

    options, _ = resolved_options(
        dataset,
        0,
        bool(full_validation),
        dataloader_type=layout.dataloader_type,
        micro_batch_size=layout.micro_batch_size,
        global_batch_size=layout.global_batch_size,
        data_parallel_rank=0,
        data_parallel_size=layout.data_parallel_size,
        data_sharding=layout.data_sharding,
        drop_last=layout.drop_last,
        seed=layout.seed,
        hybrid_context_parallel=layout.hybrid_context_parallel,
        skip_batches=None,
    )
    return replace(
        layout,
        dataloader_type=options["dataloader_type"],
        hybrid_context_parallel=options["hybrid_context_parallel"],
    )


def run_steps(dataset: Any, layout: Any) -> int:
    """The steps of the run: the traced split's samples // global_batch_size."""
    return len(dataset) // layout.global_batch_size


def _step_range(text: Optional[str], total: int, first: int) -> tuple[int, int]:
    if not text:
        return first, total
    a, colon, b = text.partition(":")
    try:
        start, stop = int(a or first), int(b or total)
    except ValueError:
        start, stop = -1, -1
    if not colon or not first <= start < stop:
        raise ConfigError(
            f"--steps {text!r}: give A:B with {first} <= A < B (B exclusive; default "
            f"{first}:{total}, the run's steps)"
        )
    return start, stop


def _steps_from(resume: Any, layout: Any) -> int:
    return 0 if resume is None else resume.consumed_samples // layout.global_batch_size


def _cmd_manifest(args: argparse.Namespace) -> int:
    from tokenloom.cli._trace_manifest import make_manifest
    from tokenloom.cli._trace_order import run_order

    dataset, layout, resume, quarantine = load_run(args)
    start, stop = _step_range(args.steps, run_steps(dataset, layout), _steps_from(resume, layout))
    order = run_order(dataset, layout, stop - start, start, resume)
    manifest = make_manifest(dataset, order, layout.describe(), start, quarantine)
    with open(args.manifest, "w", encoding="utf-8") as out:
        json.dump(manifest, out, sort_keys=True, separators=(",", ":"))
    print(
        f"wrote {args.manifest}: steps {start}..{start + order.shape[0] - 1}, "
        f"checksum {manifest['checksum'][:16]}"
    )
    return 0


def _cmd_diff(args: argparse.Namespace) -> int:
    from tokenloom.cli._trace_manifest import diff_manifests, read_manifest

    one, two = (read_manifest(path) for path in args.diff)
    step, lines = diff_manifests(one, two)
    if args.json:
        print(json.dumps({"first_differing_step": step, "differences": lines}, indent=1))
    elif step is None:
        print(f"no step differs ({one['steps']} and {two['steps']} steps compared)")
    else:
        print(f"first differing step: {step}")
    if not args.json:
        for line in lines:
            print(f"  {line}")
    return 0 if step is None else 1


def _cmd_document(args: argparse.Namespace) -> int:
    from tokenloom.cli._trace_document import document_steps, parse_document, print_document
    from tokenloom.cli._trace_order import run_order

    source, document = parse_document(args.document)
    dataset, layout, resume, quarantine = load_run(args)
    first = _steps_from(resume, layout)
    total = run_steps(dataset, layout)
    order = run_order(dataset, layout, max(total - first, 0), first, resume)
    report = document_steps(dataset, order, source, document, first, quarantine)
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        print_document(report, order.shape[0])
    return 0


def run(args: argparse.Namespace) -> int:
    """Entry point of the subcommand."""
    if args.diff:
        return _cmd_diff(args)
    if args.manifest:
        return _cmd_manifest(args)
    if args.document:
        return _cmd_document(args)
    from tokenloom.cli._trace_step import trace_step

    if args.step < 0:
        raise ConfigError(f"--step {args.step}: steps are 0-based, give N >= 0")
    return trace_step(args, *load_run(args))
